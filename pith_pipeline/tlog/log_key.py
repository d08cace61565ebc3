"""The log's key: opening it from a signer spec, naming it in the store's key
document, and reading the verifier key the key document names.

Nothing here reads the environment: the log key's spec and the log's origin are
resolved at the edge (the command's or task's settings) and passed in.
"""

from __future__ import annotations

import base64
from typing import Any

from pith_pipeline.config import env_name
from pith_pipeline.core.canonical_json import dumps_pretty, loads
from pith_pipeline.core.layout import PUBLIC_KEY_FILE
from pith_pipeline.errors import IntegrityError, KeyFileError, TerminalError
from pith_pipeline.signing import guard
from pith_pipeline.signing.factory import open_signer
from pith_pipeline.storage.base import Store
from pith_pipeline.tlog.log import LogSigner
from pith_pipeline.tlog.note import Verifier

LOG_SIGNER_ENV = env_name("log_signer")
LOG_ORIGIN_ENV = env_name("log_origin")
KEY_DOCUMENT = PUBLIC_KEY_FILE


class LogNotConfiguredError(TerminalError):
    """The store keeps a log but this run was given no log key."""


def default_origin(key_document_url: str) -> str:
    """`<host>/log` from the key document's URL (`https://host/pith-signing-key.json`)."""
    base = key_document_url.split("://", 1)[-1].rsplit("/", 1)[0] if key_document_url else ""
    if not base:
        raise LogNotConfiguredError(
            f"cannot name the log: set {LOG_ORIGIN_ENV} (e.g. pith.example.org/log) or --base-url"
        )
    return f"{base.rstrip('/')}/log"


def key_document(store: Store) -> dict[str, Any]:
    """The store's key document as a dict ({} when it is missing or not an object)."""
    raw = store.get(KEY_DOCUMENT)
    doc = loads(raw) if raw else {}
    return doc if isinstance(doc, dict) else {}


def open_log_signer(spec: str, store: Store, origin: str | None = None, *, key_url: str = "") -> LogSigner:
    """The log's signer from a signer spec; the origin from, in order: `origin` (the
    `log_origin` setting, `PITH_LOG_ORIGIN`, resolved by the caller), the one the
    store's key document already names, its URL, and `key_url` (where the key
    document will be served: a new store has none yet).

    A log key file inside a local store is refused here, the one place every command
    opens a log key: like the signing key, it would be served with the bundles."""
    guard.refuse_key_spec_inside_store(spec, store)  # before anything else is asked of the store
    doc = key_document(store)
    listed = doc.get("log") if isinstance(doc.get("log"), dict) else None
    origin = (
        origin
        or (str(listed["origin"]) if listed and listed.get("origin") else None)
        or default_origin(str(doc.get("url", "")) or key_url)
    )
    signer = open_signer(spec)
    guard.refuse_key_inside_store(signer, store)
    return LogSigner.from_signer(signer, origin)


def log_signer_for(spec: str | None, store: Store, origin: str | None = None) -> LogSigner | None:
    """The log signer a run appends with, from its settings (`log_signer`,
    `log_origin`) as the edge resolved them; None when no log key is given (a run
    without a log: `log_run` then refuses a store that keeps one)."""
    return open_log_signer(spec, store, origin) if spec else None


def log_key_member(log: LogSigner) -> dict[str, Any]:
    """The key document's `log` member naming `log` (what clients pin)."""
    return {
        "origin": log.origin,
        "vkey": log.verifier.vkey,
        "algorithm": "ed25519",
        "public_key_b64": base64.b64encode(log.public_key).decode(),
        "notes": (
            "Key of this registry's transparency log (C2SP tlog-tiles under log/). "
            "Pin the vkey; verify checkpoints with any signed-note client."
        ),
    }


def publish_log_key(store: Store, log: LogSigner) -> None:
    """Name the log key in `pith-signing-key.json` (member `log`), by compare-and-swap
    (read, change, `put_if_match`; again while another writer changed it meanwhile);
    a different log key already named there is refused: a log keeps its key."""
    member = log_key_member(log)
    for _attempt in range(50):
        got = store.get_tagged(KEY_DOCUMENT)
        doc = loads(got[0]) if got else {}
        if not isinstance(doc, dict):
            raise IntegrityError("not a JSON object", key=KEY_DOCUMENT)
        have = doc.get("log")
        if isinstance(have, dict) and have.get("vkey") == member["vkey"]:
            return
        if isinstance(have, dict) and have.get("vkey"):
            raise KeyFileError(
                f"this store's log is signed by {have.get('vkey')}; the log key given "
                f"({member['vkey']}) is another one (a log keeps its key)"
            )
        doc["log"] = member
        if store.put_if_match(KEY_DOCUMENT, dumps_pretty(doc) + b"\n", got[1] if got else None):
            return
    raise IntegrityError("kept changing under concurrent writers; run again", key=KEY_DOCUMENT)


def store_verifier(store: Store) -> Verifier:
    """The log's verifier key as the store's key document names it."""
    return verifier_from_key_doc(store.get(KEY_DOCUMENT), f"{store.url}/{KEY_DOCUMENT}")


#: What to do about a store that keeps no transparency log (one line, every command).
START_A_LOG = (
    "start one with `pith-pipeline log rebuild --store S --log-signer K` (K: the log's own "
    "key; a file: key that is missing is made; runs find file:DIR/pith-log-private-key.json "
    "beside the registry key DIR/pith-private-key.json without being told; see "
    "docs/pages/transparency-log.md)"
)


def verifier_from_key_doc(raw: bytes | None, where: str) -> Verifier:
    """The log's verifier key the key document names; `IntegrityError` in one line.

    A key document without a `log` member is the common case of a store that keeps no
    log: said so, with how to start one.
    """
    if raw is None:
        raise IntegrityError(f"{where}: missing: no key document here, so no log key (is this a Pith store?)")
    try:
        doc = loads(raw)
    except ValueError as exc:
        raise IntegrityError(f"{where}: {exc}") from None
    if isinstance(doc, dict) and "log" not in doc:
        raise IntegrityError(
            f"{where}: names no log key: this store keeps no transparency log; {START_A_LOG}"
        )
    member = doc.get("log") if isinstance(doc, dict) else None
    vkey = member.get("vkey") if isinstance(member, dict) else None
    if not isinstance(vkey, str):
        raise IntegrityError(f"{where}: it names no log key (member log.vkey)")
    try:
        return Verifier.parse(vkey)
    except (ValueError, TypeError, KeyError) as exc:
        raise IntegrityError(f"{where}: {exc}") from None
