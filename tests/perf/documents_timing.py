"""Time parsing and serialising the stored documents, before and after `core.documents`.

Not a test (nothing timed is asserted): a script to compare two trees side by side.

    PYTHONPATH=/path/to/tree python tests/perf/documents_timing.py STORE [ROUNDS]

STORE: a store built from the sample (`pith-pipeline ingest --sample --store STORE`).
On a tree with `pith_pipeline.core.documents` it times the models (`parse` and
`to_bytes`) and `check_stored_event`; on a tree without, the code they replace
(`loads` and `dumps_compact`/`dumps_pretty`, and the old `check_stored_event`).
Prints the best of ROUNDS runs (default 7) per document kind, in microseconds per
document.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

from pith_pipeline.core.canonical_json import dumps_compact, dumps_pretty, loads
from pith_pipeline.core.keys import read_key_document

try:
    from pith_pipeline.core import documents
    from pith_pipeline.core.arxiv_pointer import ArxivPointer
    from pith_pipeline.core.stored_events import KeyRing, check_stored_event
except ImportError:  # the tree before the models
    documents = None  # type: ignore[assignment]
    from pith_pipeline.core.verify import KeyRing, check_stored_event  # type: ignore[attr-defined,no-redef]

REFERENCE = Path(__file__).resolve().parents[1] / "data" / "pith-bundle-1909.11150.json"


def _best(fn: Callable[[], object], rounds: int, n: int) -> float:
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times) / max(n, 1) * 1e6


def _files(store: Path, pattern: str) -> list[tuple[str, bytes]]:
    return [(str(p.relative_to(store)), p.read_bytes()) for p in sorted(store.glob(pattern))]


def main() -> None:
    store = Path(sys.argv[1])
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 7
    key_raw = (store / "pith-signing-key.json").read_bytes()
    ring = KeyRing(read_key_document(key_raw, "pith-signing-key.json"))
    kinds = {
        "reference bundle": [("pith/CDU3BX5RMZUBC43H42ZNV4JXNI/bundle.json", REFERENCE.read_bytes())] * 50,
        "bundle": _files(store, "pith/*/bundle.json"),
        "state": _files(store, "pith/*/state.json"),
        "event": _files(store, "events/*/*.json"),
        "pointer": _files(store, "arxiv/**/*.json"),
        "key document": [("pith-signing-key.json", key_raw)] * 50,
    }
    if documents is not None:
        model = {
            "reference bundle": documents.Bundle,
            "bundle": documents.Bundle,
            "state": documents.State,
            "event": documents.Event,
            "pointer": ArxivPointer,
            "key document": documents.KeyDocument,
        }
    pretty = {"pointer", "key document"}
    side = "after (core.documents)" if documents is not None else "before (loads/dumps)"
    print(f"{side}: best of {rounds}, microseconds per document")
    for kind, files in kinds.items():
        if documents is not None:
            cls = model[kind]

            def parse(cls: type = cls, files: list[tuple[str, bytes]] = files) -> list[object]:
                return [cls.parse(raw, key) for key, raw in files]  # type: ignore[attr-defined]

            parsed = parse()

            def write(parsed: list[object] = parsed) -> list[bytes]:
                return [p.to_bytes() for p in parsed]  # type: ignore[attr-defined]

            assert [w for w in write()] == [raw for _, raw in files], f"{kind}: round trip differs"
        else:

            def parse(files: list[tuple[str, bytes]] = files, kind: str = kind) -> list[object]:
                if kind == "key document":
                    return [read_key_document(raw, key) for key, raw in files]
                return [loads(raw) for _, raw in files]

            docs = [loads(raw) for _, raw in files]
            dump = (lambda d: dumps_pretty(d) + b"\n") if kind in pretty else dumps_compact

            def write(docs: list[object] = docs, dump: Callable[[object], bytes] = dump) -> list[bytes]:
                return [dump(d) for d in docs]

        n = len(files)
        parse_us, write_us = _best(parse, rounds, n), _best(write, rounds, n)
        print(f"  {kind:17} n={n:3}  parse {parse_us:8.1f}  serialise {write_us:7.1f}")
    events = kinds["event"]

    def checked() -> None:
        for key, raw in events:
            assert check_stored_event(key, raw, ring)[1] is None

    print(f"  check_stored_event n={len(events)}  {_best(checked, rounds, len(events)):8.1f}")


if __name__ == "__main__":
    main()
