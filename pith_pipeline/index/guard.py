"""The commit guard: a table whose last commit is damaged or gone is refused.

delta-rs reads a cut-short commit file as a commit with fewer actions, and a deleted
newest commit file as the version before it, both without a word. So our writers
note each version they commit (`note_version`, after the commit), every open checks
the last commit against its own counts and against that note (`check_last_commit`),
and every write checks the writer's lease first (`check_lease`). A refused table is a
`StorageError` naming `pith-pipeline reindex`, which rebuilds it from the bundles.
"""

from __future__ import annotations

from typing import Any

from pith_pipeline.core.canonical_json import dumps, loads
from pith_pipeline.errors import StorageError
from pith_pipeline.index.delta import INDEX_PREFIX, Location
from pith_pipeline.index.schema import TableSpec
from pith_pipeline.storage.lease import check_writes

#: operationMetrics of delta-rs commits that count their add and remove actions
#: (WRITE and DELETE, OPTIMIZE, MERGE)
_ADDED_METRICS = ("num_added_files", "numFilesAdded", "num_target_files_added")
_REMOVED_METRICS = ("num_removed_files", "numFilesRemoved", "num_target_files_removed")


def commit_problem(data: bytes) -> str | None:
    """What is wrong with a Delta commit file's bytes, or None.

    Why: delta-rs reads an empty commit file as a commit with no actions, and one cut
    at a line boundary as a commit with fewer: the rows its add actions held were
    silently gone (`query` said 0 rows, `status` passed). Each of our commits starts
    with a commitInfo whose metrics count its add and remove actions, so a file with
    no commitInfo, a line that is not an action, or other counts was cut short.
    """
    lines = [line for line in data.split(b"\n") if line.strip()]
    if not lines:
        return "is empty"
    counts: dict[str, int] = {}
    info: dict[str, Any] | None = None
    for n, line in enumerate(lines, 1):
        try:
            action = loads(line)
        except ValueError:
            return f"is cut short or not JSON at line {n}"
        if not isinstance(action, dict) or len(action) != 1:
            return f"has a line that is not a Delta action (line {n})"
        ((kind, body),) = action.items()
        counts[kind] = counts.get(kind, 0) + 1
        if kind == "commitInfo" and isinstance(body, dict):
            info = body
    if info is None:
        return "has no commitInfo (cut short?)"
    metrics = info.get("operationMetrics")
    metrics = metrics if isinstance(metrics, dict) else {}
    # a MERGE counts the change data files it adds (`cdc` actions) among its added files
    merged = "num_target_files_added" in metrics
    for names, kind in ((_ADDED_METRICS, "add"), (_REMOVED_METRICS, "remove")):
        for name in names:
            got = counts.get(kind, 0)
            if kind == "add" and merged:
                got += counts.get("cdc", 0)
            want = metrics.get(name)
            if isinstance(want, int) and want != got:
                return f"holds {got} {kind} actions where its commitInfo counts {want} (cut short)"
    return None


def version_key(table: str) -> str:
    """Where the newest version our writers committed to `table` is noted.

    In the table's directory, so a `reindex` that starts the table anew removes it with
    the table; its name starts with `_`, which Delta readers and `vacuum` leave alone.
    """
    return f"{INDEX_PREFIX}{table}/_pith_version.json"


def commit_key(table: str, version: int) -> str:
    return f"{INDEX_PREFIX}{table}/_delta_log/{version:020d}.json"


def check_lease(loc: Location) -> None:
    """Every index write checks the writer's lease first (`storage.lease.check_writes`):
    Delta commits bypass the store object, so they are checked here."""
    if loc.store is not None:
        check_writes(loc.store)


def note_version(loc: Location, spec: TableSpec, version: int) -> None:
    """Note that `version` of the table was committed (after the commit, never before).

    Why: when the newest commit file is deleted, delta-rs reads the version before it
    without a word, so the rows it held were silently gone. A table whose log ends
    below the noted version has lost commits (`check_last_commit`). The note only
    grows; two writers racing may leave the lower of their versions, which misses a
    loss but never claims one. A note that cannot be written is left as it was, for the
    same reason: the commit is made, and a lower note only weakens the check.
    """
    if loc.store is None:
        return
    check_lease(loc)
    try:
        noted = _noted_version(loc, spec)
        if noted is None or version > noted:
            loc.store.put(version_key(spec.name), dumps({"version": version}))
    except StorageError:
        return


def _noted_version(loc: Location, spec: TableSpec) -> int | None:
    """The version `note_version` noted, None when none was; a note that is not one is
    damage (`StorageError`)."""
    assert loc.store is not None
    key = version_key(spec.name)
    try:
        data = loc.store.get(key)
    except StorageError:
        return None  # reading it failed: the table's own reads say what is wrong
    if data is None:
        return None
    try:
        doc = loads(data)
    except ValueError:
        doc = None
    version = doc.get("version") if isinstance(doc, dict) else None
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise StorageError(
            f"{loc.uri(spec.name)}: the index table is damaged: {key} is not a version note; "
            "`pith-pipeline reindex` rebuilds it from the bundles"
        )
    return version


def check_last_commit(loc: Location, spec: TableSpec, dt: Any) -> None:
    """Refuse a table whose last commit file is damaged (see `commit_problem`) or gone
    (its log ends below the version `note_version` noted).

    The last one only: it is the one a crash or a full disk cuts short, and reading
    every commit would cost a request per commit on S3 each time a table is opened.
    The note is read before the log is listed again: a writer notes a version only
    after its commit file exists, so a commit made since `dt` was opened is listed
    then, and only a commit that is really gone is reported.
    """
    if loc.store is None:
        return
    noted = _noted_version(loc, spec)
    if noted is not None and int(dt.version()) < noted:
        dt.update_incremental()
        if int(dt.version()) < noted:
            raise StorageError(
                f"{loc.uri(spec.name)}: the index table lost commits: its log ends at version "
                f"{dt.version()} but version {noted} was committed "
                f"({commit_key(spec.name, int(dt.version()) + 1)} is missing); "
                "`pith-pipeline reindex` rebuilds it from the bundles"
            )
    key = commit_key(spec.name, int(dt.version()))
    try:
        data = loc.store.get(key)
    except StorageError:
        return  # reading it failed: the table's own reads say so
    problem = commit_problem(data) if data is not None else None
    if problem:
        raise StorageError(
            f"{loc.uri(spec.name)}: the index table is damaged: its last commit {key} {problem}; "
            "`pith-pipeline reindex` rebuilds it from the bundles"
        )
