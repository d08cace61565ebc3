"""Checks between a signer and the store it signs for, made before anything is written.

Two mistakes an operator makes once and regrets for good:

- a private key file inside a local store's directory. Everything under a store is
  meant to be served or synced (`aws s3 sync`, a static web server), so the key would
  be published with the bundles it signs. Paths are compared after resolving
  symlinks, both the key's and the store's.
- a lost key silently replaced. The store's `pith-signing-key.json` says which key
  signs there; a run with any other key would add it as the new head key, and every
  mirror would see the registry's key change with no rotation record. So a signer
  whose key the document does not list is refused unless the caller is rotating on
  purpose (`keys rotate`, `receipts reissue`). A store with no key document yet (the
  first run) accepts any key.

`Publisher` calls both, so every command, worker and Airflow task is covered. The
transparency log's key (`--log-signer`) is checked the same way: by `Publisher`
before a run writes anything, and where it is opened (`tlog.pipeline.open_log_signer`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pith_pipeline.core.bundle import PUBLIC_KEY_FILE
from pith_pipeline.core.keys import PublicKey, read_key_document
from pith_pipeline.errors import KeyFileError
from pith_pipeline.storage.base import Store

MAX_LISTED = 3  # keys named in the refusal; a long history is summarised


def local_store_root(store: Store) -> Path | None:
    """The directory of a local store, through wrappers that read through to one
    (`Store.local_root`); None for S3 and other remote stores."""
    return store.local_root()


def signer_key_files(signer: Any) -> list[Path]:
    """The local key files behind a signer: its own, and a certified signer's root's."""
    out: list[Path] = []
    for _depth in range(8):
        if signer is None:
            break
        path = getattr(signer, "key_path", None)
        if isinstance(path, Path):
            out.append(path)
        signer = getattr(signer, "root", None)
    return out


def refuse_key_file_inside(key_file: Path, store_root: Path) -> None:
    """A KeyFileError when `key_file` (resolved) lies inside `store_root` (resolved)."""
    real = key_file.resolve()
    root = store_root.resolve()
    if real == root or real.is_relative_to(root):
        shown = f"{key_file} (resolves to {real})" if real != key_file else str(real)
        raise KeyFileError(
            f"key file {shown} is inside the store {store_root}, whose files are published; "
            "move the key out of the store directory (and make a new key if it was ever served)"
        )


def refuse_key_inside_store(signer: Any, store: Store) -> None:
    """Refuse a signer whose local key file lives in a local store's directory."""
    root = local_store_root(store)
    if root is None:
        return
    for key_file in signer_key_files(signer):
        refuse_key_file_inside(key_file, root)


def spec_key_file(spec: str | None) -> Path | None:
    """The local key file a signer spec names (`file:PATH`, a bare path, or either
    under `certified:`), without opening it; None for KMS and envelope specs."""
    rest = spec or ""
    while rest.startswith("certified:"):
        rest = rest[len("certified:") :]
    scheme, sep, path = rest.partition(":")
    if scheme == "file":
        return Path(path) if path else None
    if scheme in ("kms", "kms-envelope") or not rest:
        return None
    return Path(rest) if not sep or "/" in scheme or scheme.startswith(".") else None


def refuse_key_spec_inside_store(spec: str | None, store: Store) -> None:
    """Refuse a signer spec (the log's, which is opened only when a run ends) whose
    local key file lives in a local store's directory, before anything is written."""
    root = local_store_root(store)
    path = spec_key_file(spec)
    if root is not None and path is not None:
        refuse_key_file_inside(path.absolute(), root)


def _named(keys: Iterable[PublicKey]) -> str:
    listed = [f"{k.key_id} (fingerprint {k.fingerprint[:16]}...)" for k in keys]
    more = len(listed) - MAX_LISTED
    return ", ".join(listed[:MAX_LISTED]) + (f" and {more} more" if more > 0 else "")


def root_keys(stored: Iterable[PublicKey]) -> list[PublicKey]:
    """The listed keys a signer may sign with directly (not certified short-lived ones),
    current ones first."""
    roots = [k for k in stored if k.certificate is None]
    return sorted(roots, key=lambda k: k.rotates_at is not None)


def refuse_unlisted_key(stored: Iterable[PublicKey], published: Sequence[PublicKey], store_url: str) -> None:
    """Refuse a signer whose (root) key the store's key document does not list.

    `published` is what the signer publishes, root first (`Signer.published_keys`).
    Keys are compared by public key, not by id: a regenerated key under the old id is
    still a different key.
    """
    roots = root_keys(stored)
    if not roots or not published:
        return  # an empty store: its first run chooses the key
    head = published[0]
    if any(k.public_key == head.public_key for k in roots):
        return
    where = f"{store_url.rstrip('/')}/{PUBLIC_KEY_FILE}"
    raise KeyFileError(
        f"{where} lists {_named(roots)}, not this run's key {_named([head])}: "
        "restore the key file that signs this store (and pass it with --key/--signer), or make "
        f"the new key the store's signing key first with: pith-pipeline keys rotate --store "
        f"{store_url} --signer SPEC"
    )


def refuse_lost_default_key(store: Any, key_file: Path) -> None:
    """Before a default key is generated for a store that already has keys: refuse.

    `ingest` makes `./pith-keys` on first use; when that file is gone but the store
    lists keys, making a new one would only lead to the refusal above, with a fresh
    unused key left behind. Say what to do instead.
    """
    data = store.get(PUBLIC_KEY_FILE)
    if not data:
        return
    roots = root_keys(read_key_document(data, f"{store.url}/{PUBLIC_KEY_FILE}"))
    if not roots:
        return
    raise KeyFileError(
        f"key file {key_file} does not exist, and {store.url.rstrip('/')}/{PUBLIC_KEY_FILE} "
        f"lists {_named(roots)}: restore that key file (or pass it with --key/--signer); to sign "
        "with a new key instead, make one with `pith-pipeline keys generate --out DIR`, then run "
        f"`pith-pipeline keys rotate --store {store.url} --signer DIR/pith-private-key.json`"
    )
