"""The index manifest: the one object that says which Parquet files are the index.

`index/_manifest.json` lists, per table, the current files with their partition,
row count, size and sha256. Readers read the manifest first and open only the files
it lists, so files being written (not listed yet) and files just replaced by
compaction (listed under `retired`, deleted after a grace period) are never read
twice or half. Changing the index is one atomic compare-and-swap of this object
(`Store.put_if_match`), which commits all three tables together; a writer that
loses the race re-reads and re-applies its change, so no update is lost.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pith_pipeline.core.canonical_json import dumps_pretty, loads
from pith_pipeline.errors import StorageError
from pith_pipeline.index.schema import TABLES
from pith_pipeline.storage.base import Store

MANIFEST_KEY = "index/_manifest.json"
FORMAT = "pith-index-v1"
COMMIT_ATTEMPTS = 8


@dataclass(slots=True)
class Manifest:
    generation: int = 0
    updated_at: str | None = None
    files: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: {name: [] for name in TABLES})
    retired: list[dict[str, Any]] = field(default_factory=list)
    tag: str | None = None  # the stored object's version tag, for compare-and-swap

    @classmethod
    def from_json(cls, doc: dict[str, Any], tag: str | None) -> Manifest:
        if doc.get("format") != FORMAT:
            raise StorageError(f"{MANIFEST_KEY}: unknown index format {doc.get('format')!r}")
        files = {name: list(doc.get("tables", {}).get(name, {}).get("files", [])) for name in TABLES}
        return cls(
            generation=int(doc["generation"]),
            updated_at=doc.get("updated_at"),
            files=files,
            retired=list(doc.get("retired", [])),
            tag=tag,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "generation": self.generation,
            "updated_at": self.updated_at,
            "tables": {
                name: {
                    "partition_column": spec.partition,
                    "rows": sum(f["rows"] for f in self.files[name]),
                    "files": sorted(self.files[name], key=lambda f: f["path"]),
                }
                for name, spec in TABLES.items()
            },
            "retired": sorted(self.retired, key=lambda r: r["path"]),
        }

    def partitions(self, table: str) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {}
        for f in self.files[table]:
            out.setdefault(f["partition"], []).append(f)
        return out

    def needs_dedupe(self, table: str) -> bool:
        """Only files of one partition can share a key; one file each means no duplicates."""
        return any(len(fs) > 1 for fs in self.partitions(table).values())

    def listed(self) -> set[str]:
        return {f["path"] for fs in self.files.values() for f in fs}


def load(store: Store) -> Manifest:
    got = store.get_tagged(MANIFEST_KEY)
    if got is None:
        return Manifest()
    data, tag = got
    try:
        doc = loads(data)
    except ValueError as exc:
        raise StorageError(f"{store.url}/{MANIFEST_KEY} is not valid JSON: {exc}") from None
    return Manifest.from_json(doc, tag)


@dataclass(frozen=True, slots=True)
class Change:
    """Files one writer adds and removes; re-applied to whatever manifest is current."""

    added: dict[str, list[dict[str, Any]]]
    removed: set[str]
    retired_at: str
    drop_retired: frozenset[str] = frozenset()

    def apply(self, base: Manifest) -> Manifest:
        files = {
            name: [f for f in base.files[name] if f["path"] not in self.removed] + self.added.get(name, [])
            for name in TABLES
        }
        gone = [
            {"path": f["path"], "retired_at": self.retired_at, "retired_generation": base.generation + 1}
            for fs in base.files.values()
            for f in fs
            if f["path"] in self.removed
        ]
        retired = [r for r in base.retired if r["path"] not in self.drop_retired] + gone
        return Manifest(
            generation=base.generation + 1,
            updated_at=self.retired_at,
            files=files,
            retired=retired,
            tag=base.tag,
        )


def commit(
    store: Store,
    change: Change,
    *,
    base: Manifest | None = None,
    check: Callable[[Manifest], None] | None = None,
) -> tuple[Manifest, bytes]:
    """Apply `change` with compare-and-swap, re-reading on a lost race.

    `check(current)` may raise to abandon the change when a concurrent writer made
    it invalid (e.g. compaction whose inputs another compaction already replaced).
    """
    current = base or load(store)
    for _ in range(COMMIT_ATTEMPTS):
        if check is not None:
            check(current)
        new = change.apply(current)
        data = dumps_pretty(new.to_json()) + b"\n"
        if store.put_if_match(MANIFEST_KEY, data, current.tag):
            got = store.get_tagged(MANIFEST_KEY)
            new.tag = got[1] if got else None
            return new, data
        current = load(store)
    raise StorageError(
        f"{store.url}/{MANIFEST_KEY}: gave up after {COMMIT_ATTEMPTS} concurrent updates; try again",
        transient=True,
    )
