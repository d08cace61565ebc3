"""One parser for key documents, with one error, whoever reads the document."""

from __future__ import annotations

from pathlib import Path

import pytest

from pith_pipeline.audit import keyring_of_store
from pith_pipeline.cli import main
from pith_pipeline.core.keys import read_key_document
from pith_pipeline.errors import IntegrityError
from pith_pipeline.publish import Publisher
from pith_pipeline.signing.local import generate_key, load_signer
from pith_pipeline.storage.local import LocalStore
from pith_pipeline.storage.memory import MemoryStore
from pith_pipeline.tlog.monitor import registry_keys

DAMAGED = [b"[1, 2]", b'{"keys": {}}', b'{"key_id": "k"}', b"not json"]


@pytest.mark.parametrize("data", DAMAGED)
def test_a_damaged_document_is_an_integrity_error_naming_where(data: bytes) -> None:
    with pytest.raises(IntegrityError) as caught:
        read_key_document(data, "s3://b/p/pith-signing-key.json")
    assert caught.value.key == "s3://b/p/pith-signing-key.json"
    assert str(caught.value).startswith("s3://b/p/pith-signing-key.json: not a usable key document (")


def test_every_reader_meets_the_same_error(tmp_path: Path) -> None:
    priv, _pub, _doc = generate_key(tmp_path / "keys")
    store = MemoryStore()
    store.put("pith-signing-key.json", b"[1, 2]")
    with pytest.raises(IntegrityError, match="not a usable key document"):
        Publisher(store, load_signer(priv))
    with pytest.raises(IntegrityError, match="not a usable key document"):
        registry_keys(lambda: b"[1, 2]", "https://example.org/pith-signing-key.json")
    _ring, findings = keyring_of_store(store)
    assert [f.line() for f in findings] == [
        "pith-signing-key.json: not a usable key document (not a key document)"
    ]


def test_keys_show_names_a_damaged_document_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = LocalStore(tmp_path / "store")
    store.put("pith-signing-key.json", b"[1, 2]")
    with pytest.raises(SystemExit) as ended:
        main(["keys", "show", "--store", str(tmp_path / "store")])
    assert ended.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pith-signing-key.json: not a usable key document" in err[0]


def _doc_with(tmp_path: Path, change: str) -> bytes:
    import json

    from pith_pipeline.core.keys import Ed25519Signer, PublicKey

    _priv, pub, _doc = generate_key(tmp_path / "keys")
    head = json.loads(pub.read_bytes())
    entry = {k: v for k, v in head.items() if k != "keys"}
    other = PublicKey("x", Ed25519Signer(b"\x09" * 32, "x").public_key).to_json()
    if change == "same-id-twice":
        doc = {**entry, "keys": [entry, entry]}
    elif change == "same-id-other-key":
        doc = {**entry, "keys": [entry, {**other, "key_id": entry["key_id"]}]}
    else:  # the head names a key the list does not hold as it says
        doc = {**other, "key_id": entry["key_id"], "keys": [entry]}
    return json.dumps(doc).encode()


@pytest.mark.parametrize("change", ["same-id-twice", "same-id-other-key", "head-differs"])
def test_a_document_listing_a_key_id_twice_or_a_head_unlike_its_entry_is_refused(
    tmp_path: Path, change: str
) -> None:
    """Readers that keep the first or the last of two entries would trust different keys."""
    with pytest.raises(IntegrityError, match="not a usable key document"):
        read_key_document(_doc_with(tmp_path, change), "pith-signing-key.json")


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"public_key_b64": None}, "public_key_b64 is missing or not a string"),
        ({"public_key_b64": 5}, "public_key_b64 is missing or not a string"),
        ({"public_key_b64": "!!"}, "public_key_b64 is not base64"),
    ],
)
def test_a_damaged_key_entry_names_the_field(change: dict[str, object], says: str, tmp_path: Path) -> None:
    """A KeyError's text "('public_key_b64')" or "Only base64 data is allowed" did not
    say which field of which key was wrong."""
    import json

    _priv, pub, _doc = generate_key(tmp_path / "k")
    entry = json.loads(pub.read_text())
    for k, v in change.items():
        if v is None:
            del entry[k]
        else:
            entry[k] = v
    with pytest.raises(IntegrityError) as info:
        read_key_document(json.dumps(entry).encode(), str(pub))
    assert says in str(info.value) and str(pub) in str(info.value)
