"""Core commands: keys generate, build, verify, state."""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from tqdm import tqdm

from pith_pipeline import config
from pith_pipeline.audit import MAX_BUNDLE_BYTES, audit_store
from pith_pipeline.cli.options import (
    DEFAULT_STORE,
    command_signer,
    envvar,
    fail_if_incomplete,
    io_concurrency_option,
    lease_notice,
    shards_option,
    signer_option,
    site_options,
    store_option,
    store_to_write,
    wait_option,
    workers_option,
)
from pith_pipeline.clock import system_clock
from pith_pipeline.core.canonical_json import dumps_pretty, loads
from pith_pipeline.core.keys import PublicKey, read_key_document
from pith_pipeline.core.merge import merge
from pith_pipeline.core.verify import FAIL, Report, verify_bundle
from pith_pipeline.publish import RunSummary
from pith_pipeline.signing.local import generate_key
from pith_pipeline.sources.jsonl import iter_jsonl
from pith_pipeline.tlog.client import verify_with_log

if TYPE_CHECKING:
    from pith_pipeline.audit import Finding


def register(group: click.Group) -> None:
    group.add_command(keys)
    group.add_command(build)
    group.add_command(verify)
    group.add_command(state)


@click.group()
def keys() -> None:
    """Create and inspect signing keys."""


@keys.command("generate")
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory for pith-private-key.json (mode 0600) and pith-signing-key.json.",
)
@click.option(
    "--key-id", default=None, help="Key id to publish (default: pith-local-YYYY-MM-<fingerprint prefix>)."
)
@click.option(
    "--base-url",
    envvar=envvar("base_url"),
    default="",
    help="Base URL the public key document will be served from.",
)
def keys_generate(out_dir: Path, key_id: str | None, base_url: str) -> None:
    """Generate a local Ed25519 key and its public key document (spec section 5)."""

    priv, pub, doc = generate_key(out_dir, key_id=key_id, base_url=base_url)
    click.echo(f"private key: {priv} (mode 0600; keep it secret)")
    click.echo(f"public key:  {pub}")
    click.echo(f"key id:      {doc.key_id}")
    click.echo(f"fingerprint: {doc.fingerprint}")


def print_summary(summary: RunSummary, store_url: str) -> None:
    click.echo(f"run {summary.run_id}: {summary.line()}")
    if summary.quarantined:
        click.echo(
            f"quarantined records: {store_url}/quarantine/{summary.run_id}.jsonl (each line has the reason)",
            err=True,
        )


@click.command()
@click.option(
    "--input",
    "input_path",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="JSON lines in arXiv's metadata snapshot layout (.jsonl, .json or .json.gz).",
)
@store_option("Where to publish: a directory or s3://bucket/prefix. (env PITH_STORE)")
@signer_option(dest="key_path")
@workers_option
@io_concurrency_option
@shards_option
@wait_option
@site_options
def build(
    input_path: Path,
    store: str,
    key_path: str,
    workers: int,
    worker_chunk: int,
    io_concurrency: int | None,
    shards_spec: str | None,
    lease_wait: float,
    base_url: str,
    registry_name: str,
    signer_id: str,
    settings: config.Settings,
) -> None:
    """Build and sign one bundle per record of a JSON-lines file.

    Writes pith/<ID>/bundle.json, pith/<ID>/state.json, .well-known/pith/<ID>/bundle.json
    and pith-signing-key.json under the store. Re-running on the same input changes no
    published file. With SOURCE_DATE_EPOCH set, every timestamp written is that instant.
    Records that cannot be built are listed in quarantine/<run_id>.jsonl with the reason.
    Records are published by --workers processes (one per core by default), each paper
    always by the same one; a file of up to 500 records stays in one process.

    Writers of the same papers take turns: the run holds a lease on its shards of
    papers (all 16 unless --shards) and, while indexing, on the index. Another writer
    gets a clear message (exit 75), or waits with --wait. Papers whose stored events
    fail their checks are not published; they are named and the run exits 3.
    """
    # lazy: runs.run and runs.manifest (pyarrow, via index.sink) add 195 ms to every
    # command's start (python -X importtime -m pith_pipeline --help: 193 ms -> 390 ms)
    # lazy: pith_pipeline.index, pyarrow, 161 ms at import
    from pith_pipeline.runs.manifest import reproducible_run_id

    # lazy: pith_pipeline.index, pyarrow, 136 ms at import
    from pith_pipeline.runs.run import Run

    signer = command_signer(key_path)
    st = store_to_write(store)
    run_id = None
    if os.environ.get("SOURCE_DATE_EPOCH"):  # reproducible: same input, same run id
        with input_path.open("rb") as fh:
            digest = hashlib.file_digest(fh, "sha256").digest()
        run_id = reproducible_run_id(st, system_clock, digest)
    with (
        Run.open(
            settings,
            command="build",
            store=st,
            signer=signer,
            run_id=run_id,
            notes={"input": input_path.name},
            lease_wait=lease_wait,
            notice=lease_notice,
            index_progress=lambda: tqdm(desc="index", unit="rec", disable=None),
        ) as run,
        tqdm(desc="build", unit="rec", disable=None) as bar,
    ):
        run.publish(iter_jsonl(input_path), progress=bar.update)
    summary, manifest_key = run.summary, run.manifest_key
    print_summary(summary, st.url)
    click.echo(f"run manifest: {manifest_key}")
    fail_if_incomplete(summary, st.url)


def _is_store(location: str) -> bool:
    """An S3 URL, or a directory laid out as a store (events/, pith/ or a key document)."""
    if location.startswith("s3://"):
        return True
    path = Path(location.removeprefix("file://"))
    return path.is_dir() and (
        (path / "events").is_dir() or (path / "pith").is_dir() or (path / "pith-signing-key.json").is_file()
    )


def _bundle_files(paths: tuple[str, ...]) -> Iterator[Path]:
    for p in paths:
        path = Path(p)
        if path.is_dir():
            found = sorted(path.glob("pith/*/bundle.json")) or sorted(path.rglob("bundle.json"))
            yield from found
        else:
            yield path


def _load_bundle(path: Path) -> Any:
    """A bundle file, read up to the size limit of stored bundles."""

    with path.open("rb") as fh:
        data = fh.read(MAX_BUNDLE_BYTES + 1)
    if len(data) > MAX_BUNDLE_BYTES:
        raise ValueError(f"over the {MAX_BUNDLE_BYTES}-byte limit for a bundle")
    return loads(data)


@click.command()
@click.argument("paths", nargs=-1)
@click.option(
    "--pin",
    "pin",
    default=None,
    metavar="FINGERPRINT_HEX",
    help="Require the registry's signatures to use this key fingerprint.",
)
@click.option(
    "--keys",
    "keys_doc",
    default=None,
    metavar="KEY_DOCUMENT",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Trusted pith-signing-key.json: every key used must be in it or certified "
    "by a root in it (and signed before its rotates_at).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.option("--quiet", "-q", is_flag=True, help="Print only failures and the summary.")
@click.option(
    "--log",
    "log_location",
    default=None,
    metavar="URL|STORE",
    help="Also check every event of the bundles is in this transparency log. A store "
    "directory that keeps a log is always checked to hold exactly its events.",
)
def verify(
    paths: tuple[str, ...],
    pin: str | None,
    keys_doc: Path | None,
    as_json: bool,
    quiet: bool,
    log_location: str | None,
) -> None:
    """Verify bundles: every check of the spec by name, one line each.

    PATHS are bundle files, directories of them, or stores (a store directory or
    s3://bucket/prefix); none means the store PITH_STORE names, else ./pith-store,
    where `ingest` publishes by default. A store is audited whole: every bundle, every event object
    (its name is its content hash, the hash recomputes, the signature verifies with
    a key of the store's key document, or of --keys), that each bundle lists
    exactly its stored events, the state.json and .well-known copies and the arXiv
    pointers; each damaged object is one line naming its path, and the rest is
    still checked. Exit status: 0 when everything holds, 1 when any check fails or
    any stored object is damaged, 2 when input is unreadable (a bundle file that is
    not JSON, a path with no bundles).
    """
    if not paths:  # the store the other commands default to
        paths = (config.resolve("store").value or DEFAULT_STORE,)
    reports: list[Report] = []
    unreadable: list[str] = []
    trusted = None
    if keys_doc is not None:
        trusted = read_key_document(keys_doc.read_bytes(), str(keys_doc))
    stores = [p for p in paths if _is_store(p)]
    files = list(_bundle_files(tuple(p for p in paths if p not in stores)))
    damaged = _audit_stores(stores, pin, trusted, reports, unreadable)
    if not files and not stores:
        unreadable.append(f"no bundles found in {', '.join(paths)}")
    _verify_files(files, pin, trusted, reports, unreadable)

    log_problems = verify_with_log(paths, files, log_location, config.resolve("log_vkey").value)  # tlog
    if as_json:
        _echo_json(reports, damaged, unreadable, log_problems)
    else:
        _echo_lines(reports, damaged, unreadable, log_problems, quiet=quiet, any_store=bool(stores))
    if unreadable:
        sys.exit(2)
    sys.exit(0 if all(r.ok for r in reports) and not log_problems and not damaged else 1)


def _audit_stores(
    stores: list[str],
    pin: str | None,
    trusted: list[PublicKey] | None,
    reports: list[Report],
    unreadable: list[str],
) -> list[tuple[Finding, str]]:
    """Audit each store whole: its bundles' reports go to `reports` (their source
    prefixed with the store's URL), a store with neither bundles nor findings to
    `unreadable`. Returns the damaged stored objects, each with its store's URL."""

    damaged: list[tuple[Finding, str]] = []
    for location in stores:
        st = store_to_write(location)
        before = len(reports)
        found = 0

        def add(report: Report, url: str = st.url) -> None:
            report.source = f"{url}/{report.source}"
            reports.append(report)

        for finding in audit_store(st, pinned=pin, trusted=trusted, on_report=add):
            found += 1
            if finding.check is None:
                damaged.append((finding, st.url))
        if len(reports) == before and not found:
            unreadable.append(f"no bundles found in {st.url}")
    return damaged


def _verify_files(
    files: list[Path],
    pin: str | None,
    trusted: list[PublicKey] | None,
    reports: list[Report],
    unreadable: list[str],
) -> None:
    """Verify each bundle file into `reports`; one that cannot be read or parsed goes
    to `unreadable`, and the rest are still checked."""
    for f in files:
        try:
            bundle = _load_bundle(f)
        except (OSError, ValueError) as exc:
            unreadable.append(f"{f}: unreadable ({type(exc).__name__}: {exc})")
            continue
        reports.append(verify_bundle(bundle, pinned_fingerprint=pin, source=str(f), trusted_keys=trusted))


def _echo_json(
    reports: list[Report], damaged: list[tuple[Finding, str]], unreadable: list[str], log_problems: list[str]
) -> None:
    """`verify --json`: every report, damaged object, unreadable input and log problem."""
    click.echo(
        dumps_pretty(
            {
                "ok": all(r.ok for r in reports) and not unreadable and not log_problems and not damaged,
                "bundles": [r.to_json() for r in reports],
                "findings": [{**fd.to_json(), "store": url} for fd, url in damaged],
                "unreadable": unreadable,
                "log_problems": log_problems,
            }
        ).decode()
    )


def _echo_lines(
    reports: list[Report],
    damaged: list[tuple[Finding, str]],
    unreadable: list[str],
    log_problems: list[str],
    *,
    quiet: bool,
    any_store: bool,
) -> None:
    """`verify`'s text: one line per check (with `quiet`, failures only, each under
    its bundle's name), then problems, then one summary line."""
    for r in reports:
        if not quiet or not r.ok:  # a failure always names its bundle
            click.echo(f"{r.source}: {r.pith_number}")
        for c in r.checks:
            if quiet and c.status != FAIL:
                continue
            click.echo(f"  {c.status.upper():4} {c.name}: {c.detail}")
    for fd, url in damaged:
        click.echo(f"FAIL {fd.line(url)}")
    for u in unreadable:
        click.echo(f"ERROR {u}", err=True)
    for p in log_problems:
        click.echo(f"FAIL {p}")
    bad = sum(not r.ok for r in reports)
    click.echo(
        f"{len(reports)} bundles, {len(reports) - bad} verified, {bad} failed"
        + (f", {len(damaged)} damaged stored objects" if any_store else "")
        + (f", {len(unreadable)} unreadable" if unreadable else "")
    )


@click.command()
@click.argument("bundle_path", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--check/--no-check", default=True, help="Exit 1 when the recomputed state differs from the bundle's."
)
def state(bundle_path: Path, check: bool) -> None:
    """Recompute the merged state from a bundle's events and aliases, as a mirror would."""
    try:
        bundle = _load_bundle(bundle_path)
        events, aliases = bundle["events"], bundle["source_aliases"]
        keys = [PublicKey.from_json(k) for k in bundle["public_keys"]]
        subject = bundle["pith_number"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        click.echo(f"error: {bundle_path}: unreadable bundle ({type(exc).__name__}: {exc})", err=True)
        sys.exit(2)
    result = merge(events, aliases, keys, subject)
    click.echo(dumps_pretty(result).decode())
    same = result == bundle.get("state")
    click.echo(
        f"state_sha256 {result['state_sha256']} ({'matches' if same else 'DIFFERS FROM'} the bundle's state)",
        err=True,
    )
    if check and not same:
        sys.exit(1)
