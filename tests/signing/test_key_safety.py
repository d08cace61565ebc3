"""Local key files: never inside a store, never world-accessible, never silently replaced.

Issue 16 items 16 and 19. Each test reproduces one way an operator loses or leaks a
key: a key file kept in the directory that is served, a umask of 000, a malformed
file, and a lost key that a run would silently replace with a new head key.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SAMPLE

from pith_pipeline.errors import KeyFileError
from pith_pipeline.signing.local import PRIVATE_KEY_FILE, PUBLIC_KEY_FILE, generate_key, load_signer

# -- keys generate under umask 000 --------------------------------------------------


def test_keys_generate_ignores_a_permissive_umask(tmp_path: Path) -> None:
    out = tmp_path / "new" / "keys"
    done = subprocess.run(
        [sys.executable, "-m", "pith_pipeline", "keys", "generate", "--out", str(out)],
        umask=0,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    for d in (out, out.parent):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    assert stat.S_IMODE((out / PRIVATE_KEY_FILE).stat().st_mode) == 0o600
    # the public document is for everyone to read, and for nobody else to rewrite
    assert stat.S_IMODE((out / PUBLIC_KEY_FILE).stat().st_mode) == 0o644


def test_generate_key_in_process_ignores_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        priv, pub, _doc = generate_key(tmp_path / "a" / "b")
    finally:
        os.umask(old)
    assert stat.S_IMODE(priv.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o700
    assert stat.S_IMODE(priv.stat().st_mode) == 0o600
    assert stat.S_IMODE(pub.stat().st_mode) == 0o644


# -- malformed key files ----------------------------------------------------------------

_GOOD = {
    "kind": "pith_ed25519_private_key",
    "algorithm": "ed25519",
    "seed_b64": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
    "key_id": "k",
}

MALFORMED: dict[str, bytes] = {
    "empty": b"",
    "a list": b"[]",
    "a string": b'"pith"',
    "null": b"null",
    "an empty object": b"{}",
    "not UTF-8": b"\xff\xfe{",
    "deeply nested": b"[" * 100_000,
    "short seed": json.dumps(dict(_GOOD, seed_b64="AAAA")).encode(),
    "seed not base64": json.dumps(dict(_GOOD, seed_b64="!!")).encode(),
    "seed a number": json.dumps(dict(_GOOD, seed_b64=5)).encode(),
    "key_id a number": json.dumps(dict(_GOOD, key_id=5)).encode(),
    "key_id empty": json.dumps(dict(_GOOD, key_id="")).encode(),
    "key_id with a newline": json.dumps(dict(_GOOD, key_id="k\nforged")).encode(),
    "key_id a path": json.dumps(dict(_GOOD, key_id="../../x")).encode(),
    "public_key_hex wrong": json.dumps(dict(_GOOD, public_key_hex="00")).encode(),
}


@pytest.mark.parametrize("content", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_key_file_is_one_line_naming_it(
    content: bytes,
    tmp_path: Path,
    cli,  # type: ignore[no-untyped-def]
) -> None:
    key = tmp_path / "bad-key.json"
    key.write_bytes(content)
    key.chmod(0o600)
    with pytest.raises(KeyFileError) as info:
        load_signer(key)
    assert str(key) in str(info.value) and "\n" not in str(info.value)
    store = tmp_path / "store"
    result = cli("build", "--input", str(SAMPLE), "--store", str(store), "--key", str(key))
    assert result.code == 1
    lines = [line for line in result.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: key file ") and str(key) in lines[0], result.err
    assert not (store / PUBLIC_KEY_FILE).exists()  # nothing about a broken key reaches the store


def test_a_key_path_that_is_not_a_regular_file_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "dir.json"
    d.mkdir(mode=0o700)
    with pytest.raises(KeyFileError, match="not a regular file") as info:
        load_signer(d)
    assert str(d) in str(info.value)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(KeyFileError, match="not a regular file"):  # a read would block forever
        load_signer(fifo)


def test_keys_generate_refuses_a_key_id_it_could_not_load(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    result = cli("keys", "generate", "--out", str(tmp_path / "k"), "--key-id", "a/b")
    assert result.code == 1 and "key id" in result.err and "Traceback" not in result.err
    assert not (tmp_path / "k" / PRIVATE_KEY_FILE).exists()
