"""The table of every setting: name, environment variable, default, meaning, and how
its text is read. `pith_pipeline.config` resolves it; the CLI options, the DAG settings,
`pith-pipeline config` and docs/pages/configuration.md (`markdown_table`) are built
from it. Standard library only, like the rest of the package `config`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

DEFAULT_STORE = "./pith-store"
DEFAULT_OAI_URL = "https://oaipmh.arxiv.org/oai"
DEFAULT_API_URL = "https://export.arxiv.org/api/query"
DEFAULT_BASE_URL = "https://pith.example.org"
DEFAULT_REGISTRY_NAME = "Pith Pipeline"
DEFAULT_SIGNER_ID = "pith-pipeline"

#: Where a resolved value came from, strongest first.
SOURCES = ("flag", "variable", "env", "default")
#: What `mask` prints instead of a secret.
MASK = "****"

#: An Airflow Variable lookup: the value of the Variable `name`, or None.
Variable = Callable[[str], str | None]


@dataclass(frozen=True, slots=True)
class Setting:
    """One row of the table.

    `default` is the text the setting has when nothing sets it (None: unset, and
    `default_text` says what the code does then). `secret` settings are masked
    wherever they are shown: a signer spec names a key file or a KMS key.
    """

    name: str
    env: str
    default: str | None
    meaning: str
    secret: bool = False
    #: older environment names, read after `env`
    aliases: tuple[str, ...] = ()
    #: how to describe the default when `default` is None or not the whole story
    default_text: str | None = None
    #: how the text is read: "text", "number" (finite), "integer" or "flag" (on/off)
    kind: str = "text"
    #: the range of a number, checked wherever it is read (`positive`: more than 0)
    minimum: float | None = None
    maximum: float | None = None
    positive: bool = False

    @property
    def envs(self) -> tuple[str, ...]:
        return (self.env, *self.aliases)

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


SETTINGS: tuple[Setting, ...] = (
    # -- where to read, write and sign
    Setting("store", "PITH_STORE", DEFAULT_STORE, "The store: a directory or s3://bucket/prefix."),
    Setting(
        "signer",
        "PITH_SIGNER",
        None,
        "Signing key spec: file:PATH, kms:KEY, kms-envelope:PATH|s3://..., certified:ROOT_SPEC.",
        secret=True,
        aliases=("PITH_KEY",),
        default_text="none (ingest generates a local key for a local store)",
    ),
    Setting("oai_url", "PITH_OAI_URL", DEFAULT_OAI_URL, "OAI-PMH endpoint to harvest."),
    Setting("arxiv_api_url", "PITH_ARXIV_API_URL", DEFAULT_API_URL, "arXiv search API (ingest --ids)."),
    Setting(
        "oai_min_interval",
        "PITH_OAI_MIN_INTERVAL",
        None,
        "Seconds between OAI-PMH requests in DAG tasks; lower it only for a local mirror.",
        default_text="arXiv's policy, 3 s",
        minimum=0,
        maximum=3600,
        kind="number",
    ),
    # -- the registry's identity
    Setting("base_url", "PITH_BASE_URL", DEFAULT_BASE_URL, "Public URL the store is served at."),
    Setting("registry_name", "PITH_REGISTRY_NAME", DEFAULT_REGISTRY_NAME, "Human name used in mirror hints."),
    Setting(
        "signer_id", "PITH_SIGNER_ID", DEFAULT_SIGNER_ID, "Name of this registry in event signer blocks."
    ),
    # -- the transparency log
    Setting(
        "log_signer",
        "PITH_LOG_SIGNER",
        None,
        "Key of the store's transparency log (a signer spec, as for the signer).",
        secret=True,
        default_text=(
            "the file pith-log-private-key.json beside the registry key's file (made by the "
            "first run of a new store); a KMS signer needs one given"
        ),
    ),
    Setting(
        "keep_log",
        "PITH_KEEP_LOG",
        "1",
        "0: a new store keeps no transparency log (no log key is made), and a store without "
        "one is not told how to start one (--no-log); refused for a store that keeps a log.",
        kind="flag",
    ),
    Setting(
        "log_origin",
        "PITH_LOG_ORIGIN",
        None,
        "Origin line of the log's checkpoints.",
        default_text="the one the key document names, else HOST/log for the base URL's host",
    ),
    Setting(
        "log_vkey",
        "PITH_LOG_VKEY",
        None,
        "The log's verifier key to pin (name+id+key) when reading the log.",
        default_text="the one the key document names",
    ),
    # -- signing
    Setting(
        "envelope_kms_key",
        "PITH_ENVELOPE_KMS_KEY",
        None,
        "Symmetric KMS key that wraps the seed (keys envelope-create).",
        secret=True,
    ),
    Setting(
        "cert_hours",
        "PITH_CERT_HOURS",
        "48",
        "Hours a per-run certified key is valid.",
        kind="number",
        positive=True,
        maximum=24 * 3653,
    ),
    Setting(
        "run_id",
        "PITH_RUN_ID",
        None,
        "Run id in a per-run certified key's certificate.",
        default_text="the UTC time and a random suffix",
    ),
    # -- how to run
    Setting(
        "workers",
        "PITH_WORKERS",
        None,
        "Worker processes that build, sign and write records; 1 disables workers.",
        default_text="the usable cores",
        kind="integer",
        minimum=1,
    ),
    Setting(
        "worker_chunk",
        "PITH_WORKER_CHUNK",
        "500",
        "Records per message to a worker (tuning).",
        kind="integer",
        minimum=1,
    ),
    Setting(
        "io_concurrency",
        "PITH_IO_CONCURRENCY",
        None,
        "Papers published at once per process, each its own requests in their usual order.",
        default_text="32 on S3, 1 for a directory",
        kind="integer",
        minimum=1,
        maximum=256,
    ),
    Setting(
        "shards",
        "PITH_SHARDS",
        None,
        "Publish only these shards of papers (0-15, e.g. 0-7 or 1,3,5).",
        default_text="all",
    ),
    Setting(
        "lease_wait",
        "PITH_LEASE_WAIT",
        None,
        "Seconds to wait for another writer of the same papers (or index).",
        default_text="0 for commands (fail at once, naming the writer); 1800 in DAG tasks",
        minimum=0,
        maximum=7 * 86400,
        kind="number",
    ),
    Setting(
        "lease_ttl",
        "PITH_LEASE_TTL",
        "120",
        "Seconds a writer lease lasts without renewal.",
        kind="number",
        positive=True,
        maximum=86400,
    ),
    Setting(
        "local_fsync",
        "PITH_LOCAL_FSYNC",
        "1",
        "0 leaves flushing of a local store to the OS (benchmarks and scratch stores).",
        kind="flag",
    ),
    Setting(
        "snapshot_chunk_bytes",
        "PITH_SNAPSHOT_CHUNK_BYTES",
        str(64 * 1024 * 1024),
        "Smallest byte range of a snapshot file one DAG task builds.",
        minimum=1,
        kind="integer",
    ),
    # -- politeness towards arXiv
    Setting(
        "user_agent",
        "PITH_USER_AGENT",
        None,
        "User-Agent of every request to arXiv.",
        default_text="pith-pipeline/VERSION (purpose; the contact when set)",
    ),
    Setting("contact", "PITH_CONTACT", None, "Contact address added to the User-Agent (mailto:)."),
    Setting(
        "politeness_dir",
        "PITH_POLITENESS_DIR",
        None,
        "Directory of the per-endpoint turn files shared by every process of a user.",
        default_text="$XDG_CACHE_HOME/pith-pipeline/politeness (~/.cache/...)",
    ),
    # -- reporting
    Setting(
        "traceback",
        "PITH_TRACEBACK",
        "0",
        "1: a command prints the traceback of an unexpected error (a bug, exit 70), not one line.",
        kind="flag",
    ),
    # -- Airflow retries
    Setting(
        "retries",
        "PITH_RETRIES",
        "3",
        "Retries of a failed DAG task (terminal errors are not retried).",
        minimum=0,
        maximum=100,
        kind="integer",
    ),
    Setting(
        "retry_delay_seconds",
        "PITH_RETRY_DELAY_SECONDS",
        "60",
        "First delay before a DAG task's retry; doubles up to an hour.",
        minimum=0,
        maximum=86400,
        kind="number",
    ),
)

BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}
BY_ENV: dict[str, Setting] = {e: s for s in SETTINGS for e in s.envs}


def setting(name: str) -> Setting:
    """The row of `name`; a KeyError names a setting that is not in the table."""
    return BY_NAME[name]


def env_name(name: str) -> str:
    """The environment variable (and Airflow Variable) of setting `name`."""
    return BY_NAME[name].env


def markdown_table() -> str:
    """The table as Markdown, for docs/pages/configuration.md (a test keeps them equal)."""

    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    rows = [
        "| Setting | Environment / Airflow Variable | Default | Meaning |",
        "|---|---|---|---|",
    ]
    for s in SETTINGS:
        envs = " ".join(f"`{e}`" for e in s.envs)
        if len(s.envs) > 1:
            envs = f"`{s.env}` (or {' '.join(f'`{e}`' for e in s.aliases)})"
        default = f"`{s.default}`" if s.default is not None else ""
        if s.default_text:
            default = s.default_text if not default else f"{default} ({s.default_text})"
        meaning = s.meaning + (" Secret: masked." if s.secret else "")
        rows.append(f"| `{s.name}` | {envs} | {cell(default or 'unset')} | {cell(meaning)} |")
    return "\n".join(rows) + "\n"
