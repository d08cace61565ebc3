"""Our log, checked by Go's golang.org/x/mod/sumdb/{note,tlog} (an independent
implementation; Debian's golang-go and golang-golang-x-mod-dev, which CI installs).

Without Go this test fails rather than skips: an interoperability claim nobody
checked is not one (install with `apt-get install golang-go golang-golang-x-mod-dev`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from pith_pipeline.core.keys import Ed25519Signer
from pith_pipeline.storage.local import LocalStore
from pith_pipeline.tlog.log import LogSigner, TileReader, append_entries, store_fetch

GOPATH = "/usr/share/gocode"
SOURCE = Path(__file__).parent / "go" / "interop.go"


@pytest.fixture(scope="module")
def interop(tmp_path_factory: pytest.TempPathFactory) -> Path:
    go = shutil.which("go")
    if go is None or not (Path(GOPATH) / "src/golang.org/x/mod/sumdb/tlog").is_dir():
        pytest.fail("Go and golang.org/x/mod are needed: apt-get install golang-go golang-golang-x-mod-dev")
    out = tmp_path_factory.mktemp("go")
    env = {
        **os.environ,
        "GO111MODULE": "off",
        "GOPATH": GOPATH,
        "GOCACHE": str(out / "cache"),
        "GOFLAGS": "",
    }
    subprocess.run([go, "build", "-o", str(out / "interop"), str(SOURCE)], check=True, env=env, cwd=out)
    return out / "interop"


def check_with_go(binary: Path, request: dict[str, object]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(binary)], input=json.dumps(request), capture_output=True, text=True)


def test_go_verifies_our_checkpoint_tiles_and_proofs(interop: Path, tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path / "store"))
    key = Ed25519Signer.generate("log")
    log = LogSigner("pith.example.org/log", key.public_key, lambda m: key._sk.sign(m).signature)
    heads = []
    total = 0
    for chunk in (3, 250, 70_000 - 253):
        append_entries(store, log, [b"event %d" % i for i in range(total, total + chunk)])
        total += chunk
        reader = TileReader(store_fetch(store), total)
        heads.append((total, reader.root()))
    reader = TileReader(store_fetch(store), total)
    indexes = [0, 1, 255, 256, 65_535, 65_536, total - 1]
    request = {
        "dir": str(tmp_path / "store" / "log"),
        "vkey": log.verifier.vkey,
        "inclusion": [{"index": i, "proof": [_b64(h) for h in reader.inclusion_proof(i)]} for i in indexes],
        "consistency": [
            {"old_size": n, "old_root": _b64(r), "proof": [_b64(h) for h in reader.consistency_proof(n)]}
            for n, r in heads[:-1]
        ],
    }
    got = check_with_go(interop, request)
    assert got.returncode == 0, got.stdout + got.stderr
    assert got.stdout.count("ok inclusion") == len(indexes)
    assert got.stdout.count("ok consistency") == 2
    assert "ok tiles hash to the signed root" in got.stdout

    # and Go rejects what it should: a forged proof, a checkpoint signed by another key
    bad = dict(request, consistency=[], inclusion=[{"index": 5, "proof": request["inclusion"][0]["proof"]}])  # type: ignore[index]
    assert check_with_go(interop, bad).returncode == 1
    other = Ed25519Signer.generate("other")
    wrong = dict(request, vkey=LogSigner(log.origin, other.public_key, lambda m: b"").verifier.vkey)
    got = check_with_go(interop, wrong)
    assert got.returncode == 1 and "note.Open" in got.stdout


def _b64(h: bytes) -> str:
    import base64

    return base64.b64encode(h).decode()
