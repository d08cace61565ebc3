"""What an index change did (`IndexUpdate`), and the progress callback its steps take.

Every writer of the tables (`update_indexes`, `compact`, `reindex`) returns one
`IndexUpdate`; `record_commits` is the one way a step adds the versions it committed,
so a run manifest names every version the change made.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

#: called with how many items (bundles, records, tables) a step has just finished
Progress = Callable[[int], None]


@dataclass(slots=True)
class IndexUpdate:
    """What an index change did: each table's version after it, rows and commits."""

    versions: dict[str, int] = field(default_factory=dict)
    subjects_checked: int = 0
    subjects_changed: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    files_compacted: int = 0
    #: table -> the versions this change committed (a run manifest records them)
    commits: dict[str, list[int]] = field(default_factory=dict)
    deleted: list[str] = field(default_factory=list)

    def line(self) -> str:
        rows = ", ".join(f"{k} {v}" for k, v in self.rows.items()) or "no new rows"
        versions = ", ".join(f"{k} v{v}" for k, v in sorted(self.versions.items())) or "no tables"
        return (
            f"index ({versions}): {self.subjects_changed} of {self.subjects_checked} "
            f"records changed ({rows}); {self.files_compacted} files compacted"
        )

    def compact_line(self) -> str:
        """What `compact` did, in one line. Why not `line`: compact reads no bundle,
        so its `0 of 0 records changed (no new rows)` read as an empty index."""
        versions = ", ".join(f"{k} v{v}" for k, v in sorted(self.versions.items())) or "no tables"
        did = (
            f"{self.files_compacted} small files compacted"
            if self.files_compacted
            else "no small files to compact"
        )
        return f"index ({versions}): {did}; {len(self.deleted)} old files deleted"


def record_commits(update: IndexUpdate, table: str, versions: Iterable[int]) -> None:
    """Note the versions this change committed (`commit_key` names each one's log entry).

    Versions, not the log entries' hashes: an entry holds wall-clock times and random
    file names, so two identical runs would differ, while their versions agree.
    """
    for v in versions:
        update.commits.setdefault(table, []).append(v)
        update.versions[table] = max(update.versions.get(table, -1), v)
