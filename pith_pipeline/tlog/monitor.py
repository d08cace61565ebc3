"""What an outside auditor runs: keep the last trusted checkpoint, demand that each
new one extends it, and re-verify every entry added since.

Why a state file: the guarantee of a log is only as good as someone remembering an
old tree head. The monitor remembers one (origin, verifier key, size, root, the
signed checkpoint) and accepts a new checkpoint only when the new tree contains the
old one unchanged; it then checks each new entry is a canonical event whose id is
its content's hash and whose signature verifies with a key the registry publishes.
"""

from __future__ import annotations

import base64
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pith_pipeline.core.canonical_json import loads
from pith_pipeline.core.keys import PublicKey, read_key_document
from pith_pipeline.errors import IntegrityError, TerminalError
from pith_pipeline.tlog import merkle
from pith_pipeline.tlog.log import CHECKPOINT, Fetch, TileReader, iter_entries
from pith_pipeline.tlog.log_key import KEY_DOCUMENT, verifier_from_key_doc
from pith_pipeline.tlog.note import Verifier, open_checkpoint
from pith_pipeline.tlog.stored_events import entry_problem

STATE_FORMAT = "pith-log-monitor-state-v1"


class LogProblem(TerminalError):
    """The log broke a promise: forked, shrank, or holds an entry that does not verify."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind


@dataclass(slots=True)
class MonitorReport:
    origin: str
    old_size: int
    size: int
    root_b64: str
    checked: int
    lines: list[str] = field(default_factory=list)


def _read_state(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    try:
        state = loads(path.read_bytes())  # refuses a repeated field (a second vkey)
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            raise ValueError("not a monitor state file")
        int(state["size"])
        base64.b64decode(state["root_b64"], validate=True)
        Verifier.parse(state["vkey"])
        return state
    except (ValueError, KeyError, TypeError) as exc:
        raise IntegrityError(f"{path}: unusable monitor state ({exc}); move it away to start over") from None


def _write_state(path: Path, state: dict[str, Any]) -> None:
    """Atomically, so a monitor killed mid-write keeps its last trusted checkpoint."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(state, fh, indent=2, sort_keys=True)
        fh.write("\n")
    os.replace(tmp, path)


def registry_keys(key_doc_fetch: Callable[[], bytes | None], where: str) -> dict[str, PublicKey]:
    raw = key_doc_fetch()
    if raw is None:
        raise IntegrityError(f"{where}: the registry's key document is missing")
    return {k.key_id: k for k in read_key_document(raw, where)}


def monitor(
    fetch: Fetch,
    where: str,
    state_path: Path,
    *,
    key_doc: Callable[[], bytes | None],
    vkey: str | None = None,
    progress: Callable[[int], None] | None = None,
    events: Callable[[str], bytes | None] | None = None,
) -> MonitorReport:
    """One monitoring round. Raises `LogProblem` naming a fork, a shrink or a bad
    entry (the state file is then left as it was: the last checkpoint trusted).

    `events` reads an object of the registry beside the log by its store key: a
    hash-committed entry (`tlog.entry`) is checked against the event it names."""
    state = _read_state(state_path)
    if state is not None:
        verifier = Verifier.parse(state["vkey"])
        if vkey and Verifier.parse(vkey).vkey != verifier.vkey:
            raise IntegrityError(f"{state_path} trusts {verifier.vkey}, not the --vkey given")
    elif vkey:
        verifier = Verifier.parse(vkey)
    else:  # first contact: trust the key the registry names (pin it with --vkey)
        verifier = verifier_from_key_doc(key_doc(), f"{where}/../{KEY_DOCUMENT}")
    raw = fetch(CHECKPOINT)
    if raw is None:
        raise IntegrityError(f"{where}/{CHECKPOINT} is missing")
    try:
        cp = open_checkpoint(raw, verifier, state["origin"] if state else None)
    except ValueError as exc:
        raise LogProblem("bad checkpoint", f"{where}/{CHECKPOINT}: {exc}") from None
    old_size = int(state["size"]) if state else 0
    old_root = base64.b64decode(state["root_b64"]) if state else merkle.EMPTY_ROOT
    report = MonitorReport(cp.origin, old_size, cp.size, cp.root_b64, 0)
    if cp.size < old_size:
        raise LogProblem(
            "shrunk", f"the log shrank from {old_size} entries (trusted) to {cp.size} ({where}/{CHECKPOINT})"
        )
    reader = TileReader(fetch, cp.size, where)
    try:
        if reader.root() != cp.root:
            raise LogProblem("bad tiles", f"{where}: the tiles do not hash to the signed root")
        if old_size and not merkle.verify_consistency(
            old_size, cp.size, old_root, cp.root, reader.consistency_proof(old_size)
        ):
            raise LogProblem(
                "forked",
                f"the tree of size {cp.size} does not extend the trusted tree of size {old_size} "
                f"(root {state['root_b64'] if state else ''}); the log rewrote or dropped entries",
            )
        keys = registry_keys(key_doc, f"{where}/../{KEY_DOCUMENT}")
        seen = 0
        for idx, entry in iter_entries(reader, old_size):
            problem = entry_problem(entry, keys, events)
            if problem is not None:
                raise LogProblem("bad entry", f"entry {idx} does not verify: {problem}")
            seen += 1
            if progress is not None:
                progress(1)
    except IntegrityError as exc:
        if "does not match the tree" in str(exc):
            raise LogProblem("bad entry", str(exc)) from None
        raise
    report.checked = seen
    _write_state(
        state_path,
        {
            "format": STATE_FORMAT,
            "origin": cp.origin,
            "vkey": verifier.vkey,
            "size": cp.size,
            "root_b64": cp.root_b64,
            "checkpoint": raw.decode("utf-8"),
        },
    )
    return report
