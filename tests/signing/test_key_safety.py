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

from pith_pipeline.errors import KeyFileError
from pith_pipeline.publish import Publisher
from pith_pipeline.signing.local import PRIVATE_KEY_FILE, PUBLIC_KEY_FILE, generate_key, load_signer
from pith_pipeline.storage.local import LocalStore

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "arxiv-sample.jsonl"

# -- a private key inside the store --------------------------------------------------


def _assert_refused_naming(result: object, path: Path) -> None:
    code, err = result.code, result.err  # type: ignore[attr-defined]
    assert code == 1, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert str(path) in lines[0] and "inside the store" in lines[0]
    assert "Traceback" not in err


def test_build_refuses_a_key_file_inside_the_store(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    store = tmp_path / "store"
    priv, _pub, _doc = generate_key(store / "keys")
    result = cli("build", "--input", str(SAMPLE), "--store", str(store), "--key", str(priv), "--workers", "1")
    _assert_refused_naming(result, priv.resolve())
    # nothing was published, so the key cannot have been listed or served as a store object
    assert not (store / "pith").exists()
    assert not (store / PUBLIC_KEY_FILE).exists()


def test_a_symlink_does_not_hide_a_key_inside_the_store(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    store = tmp_path / "store"
    priv, _pub, _doc = generate_key(store / ".secret")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    link = outside / "key.json"
    link.symlink_to(priv)
    result = cli("build", "--input", str(SAMPLE), "--store", str(store), "--key", f"file:{link}")
    _assert_refused_naming(result, priv.resolve())


def test_a_store_reached_through_a_symlink_still_counts(tmp_path: Path) -> None:
    real = tmp_path / "real-store"
    priv, _pub, _doc = generate_key(real / "k")
    alias = tmp_path / "alias-store"
    alias.symlink_to(real, target_is_directory=True)
    with pytest.raises(KeyFileError, match="inside the store"):
        Publisher(LocalStore(alias), load_signer(priv))


def test_ingest_default_key_dir_inside_the_store_is_refused(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    cli,  # type: ignore[no-untyped-def]
) -> None:
    """`ingest --sample --store .` would put ./pith-keys inside the served directory."""
    monkeypatch.chdir(tmp_path)
    for var in ("PITH_STORE", "PITH_KEY", "PITH_SIGNER"):
        monkeypatch.delenv(var, raising=False)
    result = cli("ingest", "--sample", "--store", ".", "--workers", "1")
    assert result.code == 1, result.err
    assert "inside the store" in result.err and "pith-keys" in result.err
    assert "Traceback" not in result.err
    assert not (tmp_path / "pith").exists()


def test_a_key_beside_the_store_is_fine(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    priv, _pub, _doc = generate_key(tmp_path / "keys")
    store = tmp_path / "store"
    result = cli("build", "--input", str(SAMPLE), "--store", str(store), "--key", str(priv), "--workers", "1")
    assert result.code == 0, result.err
    # a store whose name merely starts like the key directory's is not "inside" it
    priv2, _pub2, _doc2 = generate_key(tmp_path / "store-keys")
    Publisher(LocalStore(tmp_path / "store-k"), load_signer(priv2))


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


# -- a lost key is not silently replaced ----------------------------------------------


def _listed(store: Path) -> list[str]:
    doc = json.loads((store / PUBLIC_KEY_FILE).read_text())
    return [k["key_id"] for k in doc["keys"]]


def test_ingest_after_the_key_is_lost_refuses_instead_of_making_a_new_head_key(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    cli,  # type: ignore[no-untyped-def]
) -> None:
    monkeypatch.chdir(tmp_path)
    for var in ("PITH_STORE", "PITH_KEY", "PITH_SIGNER"):
        monkeypatch.delenv(var, raising=False)
    first = cli("ingest", "--sample", "--workers", "1")
    assert first.code == 0, first.err  # an empty store: the first run may make a key
    store = tmp_path / "pith-store"
    before = (store / PUBLIC_KEY_FILE).read_bytes()
    (old,) = _listed(store)
    (tmp_path / "pith-keys" / PRIVATE_KEY_FILE).unlink()  # the key is lost

    again = cli("ingest", "--sample", "--workers", "1")
    assert again.code == 1
    lines = [line for line in again.err.splitlines() if line.strip()]
    assert len(lines) == 1, again.err
    assert old in lines[0] and "keys rotate" in lines[0] and "restore" in lines[0]
    assert (store / PUBLIC_KEY_FILE).read_bytes() == before
    assert not (tmp_path / "pith-keys" / PRIVATE_KEY_FILE).exists()  # no new key made either


def test_build_with_an_unlisted_key_refuses_until_keys_rotate(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    old, _pub, old_doc = generate_key(tmp_path / "old", key_id="pith-old")
    new, _pub2, new_doc = generate_key(tmp_path / "new", key_id="pith-new")
    store = tmp_path / "store"
    args = ("build", "--input", str(SAMPLE), "--store", str(store), "--workers", "1")
    assert cli(*args, "--key", str(old)).code == 0
    before = (store / PUBLIC_KEY_FILE).read_bytes()

    refused = cli(*args, "--key", str(new))
    assert refused.code == 1
    assert "pith-old" in refused.err and "pith-new" in refused.err and "keys rotate" in refused.err
    assert (store / PUBLIC_KEY_FILE).read_bytes() == before
    rebuild = cli("rebuild", "--store", str(store), "--key", str(new))
    assert rebuild.code == 1 and "keys rotate" in rebuild.err

    rotated = cli("keys", "rotate", "--store", str(store), "--signer", str(new))
    assert rotated.code == 0, rotated.err
    assert _listed(store) == ["pith-old", "pith-new"]
    # the store's log keeps its key: a registry key in another directory is given it
    # (runs look for it beside the registry key: old/pith-log-private-key.json)
    log_key = f"file:{tmp_path / 'old' / 'pith-log-private-key.json'}"
    assert cli(*args, "--key", str(new), "--log-signer", log_key).code == 0
    # and the old key, now rotated, is refused by the existing rotation check
    assert cli(*args, "--key", str(old)).code == 1
    assert old_doc.key_id != new_doc.key_id


def test_the_guard_is_in_the_publisher_for_every_command(tmp_path: Path) -> None:
    """Airflow tasks, backfills and workers all construct a Publisher: it refuses there."""
    old, _, _ = generate_key(tmp_path / "old", key_id="pith-old")
    new, _, _ = generate_key(tmp_path / "new", key_id="pith-new")
    store = LocalStore(tmp_path / "store")
    Publisher(store, load_signer(old)).publish_key_document()
    with pytest.raises(KeyFileError, match="keys rotate"):
        Publisher(store, load_signer(new))
    Publisher(store, load_signer(new), rotating=True)  # what `keys rotate` and `receipts reissue` use


ENVELOPE = {
    "kind": "pith_kms_envelope",
    "algorithm": "ed25519",
    "key_id": "pith-env",
    "public_key_hex": "00" * 32,
    "ciphertext_b64": "AAAA",
    "kms_key_id": "alias/wrap",
}
MALFORMED_ENVELOPES: dict[str, bytes] = {
    "deeply nested": b"[" * 100_000,
    "a list": b"[]",
    "not UTF-8": b"\xff\xfe",
    "key_id with a newline": json.dumps(dict(ENVELOPE, key_id="a\nb")).encode(),
}


@pytest.mark.parametrize("content", MALFORMED_ENVELOPES.values(), ids=MALFORMED_ENVELOPES.keys())
def test_a_malformed_envelope_file_is_one_line_naming_it(content: bytes, tmp_path: Path) -> None:
    """The KMS envelope is a key file too: the same rule, before KMS is ever asked."""
    from pith_pipeline.signing.factory import open_signer

    path = tmp_path / "bad.envelope.json"
    path.write_bytes(content)
    with pytest.raises(KeyFileError) as info:
        open_signer(f"kms-envelope:{path}")
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_an_envelope_path_that_cannot_be_read_is_one_line(tmp_path: Path) -> None:
    from pith_pipeline.signing.factory import open_signer

    d = tmp_path / "dir.envelope.json"
    d.mkdir()
    with pytest.raises(KeyFileError) as info:
        open_signer(f"kms-envelope:{d}")
    assert str(d) in str(info.value)


def test_every_way_to_name_a_key_checks_the_key_id_first(local_kms: object) -> None:
    """A key id with a separator or a newline would be published in every signature and
    name files; it is refused where it is given, before any KMS call (the local KMS
    endpoint is there so that a regression asks it, never AWS)."""
    from pith_pipeline.signing.envelope import create_envelope
    from pith_pipeline.signing.factory import open_signer

    with pytest.raises(KeyFileError, match="key id"):
        create_envelope("alias/wrap", key_id="a/b", client=object())
    with pytest.raises(KeyFileError, match="key id"):
        open_signer("kms:alias/pith?key_id=a%0Ab", self_test=False)


def test_a_certified_runs_root_key_and_a_staged_airflow_build_are_checked_too(tmp_path: Path) -> None:
    """The root key behind `certified:file:...` is the secret one; an Airflow build
    publishes through a staging wrapper that reads through to the local store."""
    from pith_pipeline.signing.factory import open_signer
    from pith_pipeline.storage.staging import StagingStore

    store = tmp_path / "store"
    priv, _pub, _doc = generate_key(store / "keys")
    with pytest.raises(KeyFileError, match="inside the store"):
        Publisher(LocalStore(store), open_signer(f"certified:file:{priv}"))
    with pytest.raises(KeyFileError, match="inside the store"):
        Publisher(StagingStore(LocalStore(store)), load_signer(priv))


def test_a_log_key_file_inside_the_store_is_refused_too(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    """The transparency log's private key is as secret as the signing key: inside the
    store it would be served with the bundles. Every command that opens a log key
    (`build`/`ingest` with --log-signer, `log sync`, `log rebuild`) goes through one
    function, which refuses it."""
    store = tmp_path / "store"
    signing, _pub, _doc = generate_key(tmp_path / "keys")
    log_key, _pub2, _doc2 = generate_key(store / "log-keys", key_id="pith-log-1")
    result = cli(
        "build", "--input", str(SAMPLE), "--store", str(store), "--key", str(signing),
        "--log-signer", str(log_key), "--workers", "1",
    )  # fmt: skip
    _assert_refused_naming(result, log_key.resolve())
    assert not (store / "pith").exists()
    for sub in ("sync", "rebuild"):
        result = cli("log", sub, "--store", str(store), "--log-signer", str(log_key))
        _assert_refused_naming(result, log_key.resolve())


@pytest.mark.parametrize("failing_write", [1, 2])  # the private key file, the public key document
def test_a_full_disk_during_keys_generate_leaves_no_half_written_key(
    tmp_path: Path, cli, monkeypatch: pytest.MonkeyPatch, failing_write: int
) -> None:  # type: ignore[no-untyped-def]
    """An empty private key file left by ENOSPC made every later `keys generate` refuse
    ("already exists") and every run fail to parse it: generation is all or nothing."""
    import errno

    real_write = os.write
    writes = []

    def write(fd: int, data: bytes) -> int:
        writes.append(fd)
        if len(writes) == failing_write:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    out = tmp_path / "keys"
    monkeypatch.setattr(os, "write", write)
    result = cli("keys", "generate", "--out", str(out))
    monkeypatch.setattr(os, "write", real_write)
    assert result.code == 1 and "Traceback" not in result.err
    lines = [line for line in result.err.splitlines() if line.strip()]
    assert len(lines) == 1 and str(out) in lines[0] and "disk is full" in lines[0], result.err
    assert not (out / PRIVATE_KEY_FILE).exists() and not (out / PUBLIC_KEY_FILE).exists()
    assert cli("keys", "generate", "--out", str(out)).code == 0  # free space, run again
    load_signer(out / PRIVATE_KEY_FILE)


# -- duplicate keys ---------------------------------------------------------------------


def test_a_key_file_with_a_repeated_field_is_refused(tmp_path: Path) -> None:
    """Two `key_id`s (or seeds) say two things at once: whichever a reader keeps, the
    file means something else to another reader, so it is refused, naming the file."""
    from pith_pipeline.signing.factory import open_signer

    priv, _pub, _doc = generate_key(tmp_path / "keys")
    text = priv.read_text()
    doubled = text.replace('"kind"', '"key_id": "forged-id",\n  "kind"', 1)
    bad = tmp_path / "dup.json"
    bad.write_text(doubled)
    bad.chmod(0o600)
    with pytest.raises(KeyFileError) as info:
        open_signer(f"file:{bad}")
    msg = str(info.value)
    assert str(bad) in msg and "key_id" in msg and "\n" not in msg


def test_an_envelope_with_a_repeated_field_is_refused(tmp_path: Path) -> None:
    from pith_pipeline.signing.factory import open_signer

    body = json.dumps(ENVELOPE)[:-1] + ', "key_id": "other-id"}'
    path = tmp_path / "dup.envelope.json"
    path.write_text(body)
    with pytest.raises(KeyFileError) as info:
        open_signer(f"kms-envelope:{path}")
    msg = str(info.value)
    assert str(path) in msg and "key_id" in msg and "\n" not in msg


def test_a_monitor_state_with_a_repeated_field_is_refused(tmp_path: Path) -> None:
    """The monitor's state holds the log key it trusts: a second `vkey` must not be read
    past (the json module kept the last one)."""
    from pith_pipeline.errors import IntegrityError
    from pith_pipeline.tlog.monitor import _read_state

    path = tmp_path / "monitor-state.json"
    path.write_text('{"format": "x", "size": 1, "format": "y"}')
    with pytest.raises(IntegrityError) as info:
        _read_state(path)
    assert str(path) in str(info.value) and "duplicate key 'format'" in str(info.value)


# -- what a key file error says ----------------------------------------------------------

_SEED = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="


def _without(name: str) -> bytes:
    return json.dumps({k: v for k, v in _GOOD.items() if k != name}).encode()


SAYS: dict[str, tuple[bytes, str]] = {
    "key_id missing": (_without("key_id"), "key_id is missing"),
    "seed missing": (_without("seed_b64"), "seed_b64 is missing"),
    "kind missing": (_without("kind"), "kind"),
    "wrong algorithm": (json.dumps(dict(_GOOD, algorithm="rsa")).encode(), "algorithm"),
    "seed a number": (json.dumps(dict(_GOOD, seed_b64=5)).encode(), "seed_b64 is a number, not a string"),
    "seed not base64": (json.dumps(dict(_GOOD, seed_b64="!!")).encode(), "seed_b64 is not base64"),
    "short seed": (json.dumps(dict(_GOOD, seed_b64="AAAA")).encode(), "seed_b64 holds 3 bytes, not 32"),
    "public hex a number": (json.dumps(dict(_GOOD, public_key_hex=7)).encode(), "public_key_hex is a number"),
    "a list": (b"[]", "not a JSON object"),
    "not JSON": (b'{"kind": ', "not JSON"),
    "empty": (b"", "empty"),
    "not UTF-8": (b'{"kind": "\xff"}', "not JSON"),
    "deeply nested": (b"[" * 100_000, "not JSON"),
}


@pytest.mark.parametrize("case", SAYS.values(), ids=SAYS.keys())
def test_a_key_file_error_says_what_is_wrong_and_where(case: tuple[bytes, str], tmp_path: Path) -> None:
    content, says = case
    key = tmp_path / "bad-key.json"
    key.write_bytes(content)
    key.chmod(0o600)
    with pytest.raises(KeyFileError) as info:
        load_signer(key)
    msg = str(info.value)
    assert str(key) in msg and says in msg and "\n" not in msg, msg
    assert "Error)" not in msg  # an exception's type name tells the operator nothing
    assert _SEED not in msg and "AAAA" not in msg  # never the key material


def test_a_public_key_document_given_as_the_key_says_so(tmp_path: Path) -> None:
    from pith_pipeline.signing.factory import open_signer

    _priv, pub, _doc = generate_key(tmp_path / "keys")
    pub.chmod(0o600)
    for spec in (f"file:{pub}", str(pub)):
        with pytest.raises(KeyFileError) as info:
            open_signer(spec)
        msg = str(info.value)
        assert str(pub) in msg and "public key document" in msg and PRIVATE_KEY_FILE in msg, msg


def test_an_envelope_given_as_a_key_file_says_to_use_kms_envelope(tmp_path: Path) -> None:
    path = tmp_path / "env.json"
    path.write_text(json.dumps(ENVELOPE))
    path.chmod(0o600)
    with pytest.raises(KeyFileError, match="kms-envelope:") as info:
        load_signer(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("spec", ["file:", "file:  ", ""])
def test_an_empty_key_path_says_that_a_path_is_needed(spec: str) -> None:
    from pith_pipeline.signing.factory import open_signer

    with pytest.raises(KeyFileError) as info:
        open_signer(spec)
    msg = str(info.value)
    assert "key file . " not in msg and "path" in msg, msg


def test_a_key_directory_given_as_the_key_names_the_file_to_give(tmp_path: Path) -> None:
    priv, _pub, _doc = generate_key(tmp_path / "keys")
    with pytest.raises(KeyFileError) as info:
        load_signer(priv.parent)
    msg = str(info.value)
    assert "a directory" in msg and str(priv) in msg, msg


def test_a_private_key_file_given_as_an_envelope_says_to_use_file(tmp_path: Path) -> None:
    from pith_pipeline.signing.factory import open_signer

    priv, pub, _doc = generate_key(tmp_path / "keys")
    with pytest.raises(KeyFileError, match="--signer file:") as info:
        open_signer(f"kms-envelope:{priv}")
    assert str(priv) in str(info.value)
    with pytest.raises(KeyFileError, match="public key document"):
        open_signer(f"kms-envelope:{pub}")
    bad = tmp_path / "short.envelope.json"
    bad.write_text(json.dumps(dict(ENVELOPE, public_key_hex="00" * 31)))
    with pytest.raises(KeyFileError, match="public_key_hex holds 31 bytes, not 32"):
        open_signer(f"kms-envelope:{bad}")


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o757, 0o1777])
def test_keys_generate_refuses_an_existing_directory_others_can_write(
    mode: int,
    tmp_path: Path,
    cli,  # type: ignore[no-untyped-def]
) -> None:
    """Whoever can write the directory can replace the key file (or the public document)
    after it is made: refused like ssh's StrictModes, naming the fix; nothing is written."""
    out = tmp_path / "shared"
    out.mkdir()
    out.chmod(mode)
    with pytest.raises(KeyFileError, match=f"chmod 700 {out}"):
        generate_key(out)
    result = cli("keys", "generate", "--out", str(out))
    assert result.code == 1
    lines = [line for line in result.err.splitlines() if line.strip()]
    assert len(lines) == 1 and str(out) in lines[0] and "chmod 700" in lines[0], result.err
    assert list(out.iterdir()) == []


def test_keys_generate_into_an_existing_0755_directory_is_fine(tmp_path: Path) -> None:
    out = tmp_path / "keys"
    out.mkdir()
    out.chmod(0o755)
    priv, _pub, _doc = generate_key(out)
    assert load_signer(priv).key_id
    assert stat.S_IMODE(out.stat().st_mode) == 0o755  # an existing directory is not ours to chmod


def test_keys_generate_refuses_a_new_directory_under_one_others_can_write(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # others could rename the new 0700 directory away and put theirs
    with pytest.raises(KeyFileError, match=f"chmod 700 {shared}"):
        generate_key(shared / "keys")
    assert not (shared / "keys").exists()
    shared.chmod(0o1777)  # sticky, like /tmp: nobody else can rename what we make in it
    priv, _pub, _doc = generate_key(shared / "keys")
    assert stat.S_IMODE(priv.parent.stat().st_mode) == 0o700


def test_a_key_id_of_the_wrong_type_says_so_in_json_terms(tmp_path: Path) -> None:
    key = tmp_path / "k.json"
    key.write_text(json.dumps(dict(_GOOD, key_id=5)))
    key.chmod(0o600)
    with pytest.raises(KeyFileError) as info:
        load_signer(key)
    assert "key id (a number, not a string)" in str(info.value) and " int " not in str(info.value)


@pytest.mark.parametrize("option", ["max_rps=inf", "max_rps=nan", "max_rps=1e999", "max_rps=-5", "max_rps=0"])
def test_kms_max_rps_is_a_finite_positive_number(local_kms: object, option: str) -> None:
    """`float()` reads `inf` and `nan`: `max_rps=inf` ended in an OverflowError
    traceback, and a rate of 0 or less was taken as "unlimited"."""
    from pith_pipeline.signing.factory import open_signer

    with pytest.raises(KeyFileError, match=option.split("=")[0]):
        open_signer(f"kms:alias/pith-signing?{option}", self_test=False)
