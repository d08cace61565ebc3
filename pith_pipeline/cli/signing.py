"""Signing commands: `keys envelope-create`, `keys rotate`, `keys show`, `receipts reissue`."""

from __future__ import annotations

from pathlib import Path

import click
from tqdm import tqdm

from pith_pipeline.cli.options import (
    build_config,
    command_settings,
    command_signer,
    envvar,
    existing_store,
    lease_notice,
    signer_option,
    site_options,
    store_option,
    store_to_write,
    wait_option,
)
from pith_pipeline.clock import system_clock
from pith_pipeline.core.bundle import PUBLIC_KEY_FILE
from pith_pipeline.core.keys import read_key_document
from pith_pipeline.core.timeutil import iso_micros
from pith_pipeline.errors import InputError
from pith_pipeline.publish import Publisher
from pith_pipeline.reissue import Reissuer, rotate_keys
from pith_pipeline.signing.envelope import create_envelope, write_envelope
from pith_pipeline.signing.local import check_key_dir


def register(group: click.Group) -> None:
    """Add `receipts` and extend the `keys` group defined by the core commands."""
    keys = group.commands.get("keys")
    if isinstance(keys, click.Group):
        keys.add_command(envelope_create)
        keys.add_command(rotate)
        keys.add_command(show)
    group.add_command(receipts)


@click.command("envelope-create")
@click.option(
    "--kms-key",
    required=True,
    envvar=envvar("envelope_kms_key"),
    metavar="KEY_ID_OR_ALIAS",
    help="Symmetric KMS key that wraps the seed (e.g. alias/pith-wrap).",
)
@click.option(
    "--out",
    "out",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Envelope file to write (never replaced; upload it to S3 if you like).",
)
@click.option(
    "--key-id", default=None, help="Key id to publish (default: pith-env-YYYY-MM-<fingerprint prefix>)."
)
@click.option("--region", envvar="AWS_REGION", default=None, help="AWS region of the KMS key.")
def envelope_create(kms_key: str, out: Path, key_id: str | None, region: str | None) -> None:
    """Create an Ed25519 key whose seed exists only encrypted under a KMS key.

    The seed is generated in memory, sent once to KMS Encrypt (with an encryption
    context naming the key id) and forgotten; the file holds the ciphertext, the
    public key and the key id. Sign with it via --signer kms-envelope:FILE.

    \b
    Example:
      pith-pipeline keys envelope-create --kms-key alias/pith-wrap --out keys/pith.envelope.json
      pith-pipeline build --input papers.jsonl --store out/ \\
          --signer kms-envelope:keys/pith.envelope.json
    """

    if out.exists():
        raise click.UsageError(f"{out} already exists; refusing to replace an envelope")
    check_key_dir(out.parent)  # before KMS is asked: a key it wraps must not be left unwritten
    env = create_envelope(kms_key, key_id=key_id, region=region)
    write_envelope(out, env)
    click.echo(f"envelope:    {out}")
    click.echo(f"key id:      {env['key_id']}")
    click.echo(f"fingerprint: {env['public_key_fingerprint']}")
    click.echo(f"wrapped by:  {env['kms_key_id']}")


@click.command("rotate")
@store_option("Store whose pith-signing-key.json to update (directory or s3://...).")
@signer_option()
@site_options
def rotate(store: str, signer_spec: str, base_url: str, registry_name: str, signer_id: str) -> None:
    """Make SPEC the store's signing key; older keys get rotates_at = now.

    Signatures by a rotated key still count when made before its rotates_at. To
    move receipts, events and bundles to the new key as well, run
    `pith-pipeline receipts reissue` instead (it rotates too). This (or reissue) is
    the only way to bring a key the store does not list: other commands refuse
    one, so that a lost key is never silently replaced (see docs/pages/keys.md).
    """

    pub = Publisher(
        store_to_write(store),
        command_signer(signer_spec),
        build_config(base_url, registry_name, signer_id),
        rotating=True,  # the one command that may bring a key the store does not list yet
    )
    rotated = rotate_keys(pub, iso_micros(system_clock()))
    click.echo(f"current key: {pub.primary_key_id}")
    click.echo(f"rotated:     {', '.join(rotated) or 'none'}")


@click.command("show")
@store_option("Store to read (directory or s3://...).")
def show(store: str) -> None:
    """List the keys in a store's pith-signing-key.json with fingerprints and rotates_at."""

    st = existing_store(store)
    data = st.get(PUBLIC_KEY_FILE)
    if data is None:
        raise InputError(f"{st.url}/{PUBLIC_KEY_FILE} does not exist")
    for k in read_key_document(data, f"{st.url}/{PUBLIC_KEY_FILE}"):
        cert = k.certificate
        extra = f" certified by {cert.get('issuer_key_id')}" if cert else ""
        click.echo(f"{k.key_id}  {k.fingerprint}  rotates_at={k.rotates_at}{extra}")


@click.group()
def receipts() -> None:
    """Receipts: re-issue them (and every event and bundle signature) with a new key."""


@receipts.command("reissue")
@store_option("Store to re-sign (directory or s3://bucket/prefix).")
@signer_option()
@click.option(
    "--workers",
    type=click.IntRange(1, 256),
    default=8,
    show_default=True,
    help="Records re-signed at once (KMS signs each record's events concurrently "
    "too; keep workers x concurrency under your KMS quota).",
)
@wait_option
@site_options
def reissue(
    store: str,
    signer_spec: str,
    workers: int,
    lease_wait: float,
    base_url: str,
    registry_name: str,
    signer_id: str,
) -> None:
    """Rotate to a new key and re-sign every receipt, event and bundle in a store.

    Event ids and first_computed_at never change. Each event gets a copy signed by
    the new key beside its write-once original; each record gets a re-issued
    receipt (new key, signed_at, last_reissued_at) in a `correction` event of kind
    `receipt_reissued`; each bundle is rebuilt and signed by the new key; older keys
    get rotates_at = now in pith-signing-key.json. Running it twice with the same
    key changes nothing.

    \b
    Example:
      pith-pipeline keys generate --out keys-2026-06/ --key-id pith-v2-2026-06
      pith-pipeline receipts reissue --store out/ --signer keys-2026-06/pith-private-key.json
      pith-pipeline verify out/ --keys out/pith-signing-key.json
    """

    # lazy: pith_pipeline.index, pyarrow, 136 ms at import
    from pith_pipeline.runs.run import LOG_ONLY, Run

    with Run.open(
        command_settings(),
        command="receipts reissue",
        store=existing_store(store),
        signer=command_signer(signer_spec),
        lease_wait=lease_wait,
        notice=lease_notice,
        ending=LOG_ONLY,  # the new correction events into the log, if the store keeps one
        rotating=True,
        workers=1,
    ) as run:
        r = Reissuer(run.store, run.signer, publisher=run.publisher)
        with tqdm(total=len(r.subjects()), desc="reissue", unit="rec", disable=None) as bar:
            summary = r.run(workers=workers, progress=bar.update)
    click.echo(summary.line())
    if summary.rotated:
        click.echo(
            f"verify with: pith-pipeline verify {store} --keys {store.rstrip('/')}/pith-signing-key.json"
        )
