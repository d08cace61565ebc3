"""What `pith-pipeline ingest`'s options choose: its one source, arXiv's politeness
rule, and its signer (the embedded default key when none is given)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import click

from pith_pipeline.cli.options import command_signer, store_to_write
from pith_pipeline.core.keys import Signer
from pith_pipeline.errors import InputError
from pith_pipeline.signing import guard
from pith_pipeline.signing.local import DEFAULT_KEY_DIR, PRIVATE_KEY_FILE, generate_key, load_signer
from pith_pipeline.sources.politeness import ARXIV_MIN_INTERVAL


def is_arxiv(url: str) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    return host == "arxiv.org" or host.endswith(".arxiv.org")


def default_signer(store: str, base_url: str) -> Signer:
    """The embedded default: a local key in ./pith-keys, made on first use (local stores
    only), never inside the store and never for a store that already lists a key."""
    if store.startswith("s3://"):
        raise InputError(
            "a store in S3 needs an explicit key: --signer kms:ALIAS or "
            "--key PATH (or PITH_SIGNER / PITH_KEY)"
        )
    path = DEFAULT_KEY_DIR / PRIVATE_KEY_FILE
    st = store_to_write(store)
    root = guard.local_store_root(st)
    if root is not None:  # checked before a key is made there: `--store .` would serve it
        guard.refuse_key_file_inside(path.absolute(), root)
    if not path.exists():
        guard.refuse_lost_default_key(st, path)  # a store with keys: never a silent new key
        priv, pub, doc = generate_key(DEFAULT_KEY_DIR, base_url=base_url)
        click.echo(
            f"no key given (--key/--signer, PITH_KEY/PITH_SIGNER): generated a local "
            f"Ed25519 key {priv} (mode 0600; keep it secret), key id {doc.key_id}, "
            f"public key {pub}",
            err=True,
        )
    return load_signer(path)


def chosen_source(
    *,
    window_given: bool,
    sample: bool,
    ids: str | None,
    query: str | None,
    snapshot: Path | None,
    categories: tuple[str, ...],
    incremental: bool,
    replay: bool,
) -> list[str]:
    """The one source the options choose (empty for a bare --replay); a usage error
    naming the options when they choose none, or more than one."""
    chosen = [
        name
        for name, on in (
            ("--sample", sample),
            ("--ids", ids is not None),
            ("--query", query is not None),
            ("--snapshot", snapshot is not None),
            ("--incremental", incremental),
        )
        if on
    ]
    if window_given and not snapshot and not replay and not sample and not incremental:
        chosen.append("--from/--until")
    if len(chosen) > 1:
        raise click.UsageError(f"choose one source, not {' and '.join(chosen)}")
    if replay and (ids or query or snapshot):
        raise click.UsageError(
            "--replay rebuilds from stored OAI pages; it takes --from/"
            "--until/--set or --sample, not --ids/--query/--snapshot"
        )
    if not chosen and not replay:
        raise click.UsageError(
            "nothing to ingest: give --sample, --from/--until, "
            "--incremental, --ids, --query, --snapshot or --replay "
            "(see --help)"
        )
    if categories and not snapshot:
        raise click.UsageError("--category filters --snapshot; for OAI use --set")
    return chosen


def check_politeness(min_interval: float, *, oai_url: str | None, api_url: str | None) -> None:
    """Refuse a --min-interval below arXiv's rule for a run that asks arXiv (the URLs
    it will use; None: not used)."""
    if min_interval < ARXIV_MIN_INTERVAL and any(u and is_arxiv(u) for u in (oai_url, api_url)):
        raise click.UsageError(
            f"arXiv asks for at most one request every "
            f"{ARXIV_MIN_INTERVAL:g} s; --min-interval {min_interval:g} is "
            "allowed only for other servers"
        )


def signer_of(signer_spec: str | None, store: str, base_url: str) -> tuple[Signer, str]:
    """The run's signer and its spec (worker processes open the spec themselves:
    signers are never pickled); without one, the local key in ./pith-keys."""
    if signer_spec is None:
        signer = default_signer(store, base_url)
        return signer, f"file:{(DEFAULT_KEY_DIR / PRIVATE_KEY_FILE).resolve()}"
    return open_signer_spec(signer_spec), signer_spec


def open_signer_spec(spec: str) -> Signer:
    """The signer of a --signer spec."""
    return command_signer(spec)
