"""A run's identity and counts: `BuildConfig` (whose registry this is), `RunSummary`
(what a run did, and every object it wrote) and `new_run_id`.

Kept apart from the publisher so the loop, the manifest and the CLI can count a run
without importing how a paper is published.
"""

from __future__ import annotations

import secrets
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, Protocol

from pith_pipeline import config
from pith_pipeline._internal.disk_backed import Ledger, SpillList
from pith_pipeline.core.bundle import Site
from pith_pipeline.core.events import BUILDER_VERSION


class LeaseCheck(Protocol):
    """What a publisher needs of a writer lease: to stop once it is lost."""

    def check(self) -> None: ...


DEFAULT_BASE_URL = config.DEFAULT_BASE_URL  # the settings table is the one place for defaults
#: Failed papers named in a run's summary and manifest (the count is always exact).
MAX_PROBLEMS = 1000


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildConfig:
    """Registry identity; every field has a default that works for a local store."""

    base_url: str = DEFAULT_BASE_URL
    registry_name: str = config.DEFAULT_REGISTRY_NAME
    signer_id: str = config.DEFAULT_SIGNER_ID
    builder_version: str = BUILDER_VERSION

    @property
    def site(self) -> Site:
        return Site(base_url=self.base_url, registry_name=self.registry_name, signer_id=self.signer_id)

    @classmethod
    def of(cls, settings: config.Settings) -> BuildConfig:
        """The registry identity of a task's (or `pith-pipeline backfill`'s) settings."""
        return cls(
            base_url=settings.base_url, registry_name=settings.registry_name, signer_id=settings.signer_id
        )


@dataclass(slots=True)
class RunSummary:
    """Counts a run reports at its end, and every object it wrote with its sha256."""

    run_id: str
    fetched: int = 0
    built: int = 0
    unchanged: int = 0
    superseded: int = 0
    quarantined: int = 0
    #: papers not published because a stored object of theirs failed its checks
    failed: int = 0
    #: records of shards this run does not own (`--shards`), left to their writer
    skipped: int = 0
    #: one line per failed paper, naming the object (the first MAX_PROBLEMS of them)
    problems: list[str] = field(default_factory=list)
    written: MutableMapping[str, str] = field(default_factory=lambda: Ledger())
    # one entry per paper each: past 100,000 they move to disk (`spill`), so a run's
    # memory does not grow with the number of papers
    pith_numbers: SpillList | list[str] = field(default_factory=SpillList)
    # every subject this run published or found already published (built + unchanged):
    # the index update re-checks them, so a run that died before indexing is healed
    seen: SpillList | list[str] = field(default_factory=SpillList)
    #: the transparency log's pending markers (`tlog.pending`) this run's publishers
    #: wrote; its ledger covers their events, so the run settles them once it logs
    log_pending: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        out = {
            "fetched": self.fetched,
            "built": self.built,
            "unchanged": self.unchanged,
            "superseded": self.superseded,
            "quarantined": self.quarantined,
        }
        if self.failed:
            out["failed"] = self.failed
        if self.skipped:
            out["skipped"] = self.skipped
        return out

    def line(self) -> str:
        return ", ".join(f"{k} {v}" for k, v in self.counts().items())

    def fail(self, problem: str) -> None:
        """A paper that was not published because a stored object failed its checks."""
        self.failed += 1
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(problem)

    #: the counters `add` sums (every one `counts` reports, plus `failed` and `skipped`)
    COUNTERS: ClassVar[tuple[str, ...]] = (
        "fetched",
        "built",
        "unchanged",
        "superseded",
        "quarantined",
        "failed",
        "skipped",
    )

    def add(self, other: RunSummary) -> RunSummary:
        """Fold another summary of the same run into this one, and return this one.

        Why one method: a run's parts (a thread's paper, a worker's chunk, an Airflow
        task's staged chunk, a backfill's window) are each counted as a `RunSummary`
        and added up here, so a new counter is added in one place, not in four. The
        named problems stay capped at `MAX_PROBLEMS` while `failed` stays exact.
        """
        for name in self.COUNTERS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        room = max(0, MAX_PROBLEMS - len(self.problems))
        self.problems.extend(other.problems[:room])
        for key, sha in other.written.items():
            self.written[key] = sha
        self.pith_numbers.extend(other.pith_numbers)
        self.seen.extend(other.seen)
        self.log_pending.extend(other.log_pending)
        return self

    @classmethod
    def part(cls, run_id: str, **counts: int) -> RunSummary:
        """A summary held in plain lists and a dict (a thread's or a worker's share of
        a run: small, picklable, and never spilled to a temporary database)."""
        part = cls(run_id, written={}, pith_numbers=[], seen=[])
        for name, n in counts.items():
            if name not in cls.COUNTERS:
                raise TypeError(f"RunSummary has no counter {name!r}")
            setattr(part, name, n)
        return part

    def to_header(self) -> dict[str, Any]:
        """This summary as the JSON fields of a staged chunk's header.

        Why here: the header is the summary's only serialised form (an Airflow build
        task writes it, the index and manifest tasks read it back with `from_header`),
        so the two directions live beside the fields they cover. Lists are sorted, so
        the same chunk gives the same header on every retry.
        """
        identities = sorted(self.seen)
        return {
            "counts": {"records": len(identities), **self.counts()},
            "identities": identities,
            "built": sorted(self.pith_numbers),
            "problems": list(self.problems),
            "written": dict(sorted(self.written.items())),
            # the run logs these events at its end and settles the markers (`tlog.pending`)
            "log_pending": list(self.log_pending),
        }

    @classmethod
    def from_header(cls, run_id: str, header: dict[str, Any]) -> RunSummary:
        """The part of run `run_id` that a staged header (`to_header`) records.

        A record outside the chunk's shards is counted as fetched by the task that
        owns it, so `skipped` records are not counted as fetched here.
        """
        c = header["counts"]
        part = cls.part(
            run_id,
            fetched=c["fetched"] - c.get("skipped", 0),
            built=c["built"],
            unchanged=c["unchanged"],
            superseded=c["superseded"],
            quarantined=c["quarantined"],
            failed=c.get("failed", 0),
        )
        part.problems.extend(str(p) for p in header.get("problems", []))
        part.pith_numbers.extend(header["built"])
        part.seen.extend(header["identities"])
        part.written.update(header.get("written", {}))
        part.log_pending.extend(header.get("log_pending", []))
        return part


def new_run_id(now: datetime) -> str:
    """A run's id: its start to the second, and six random hex digits so two runs
    started in one second differ."""
    return f"{now:%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"
