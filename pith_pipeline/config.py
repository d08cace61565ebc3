"""Every setting of the pipeline in one table, and the one rule that resolves them.

A setting is found, first match wins, as:

1. a command-line flag (`--store`);
2. an Airflow Variable of the setting's environment name (DAG tasks only, so an
   operator can change a deployment from the Airflow UI);
3. the environment (`PITH_STORE`, then the setting's older aliases);
4. the default in the table.

An empty value counts as unset at every step, as click treats an empty environment
variable. Why one table: the defaults used to be written three times (the CLI
options, the library, the DAG settings) and 27 `PITH_*` variables were read in 16
modules. The CLI options, the DAG settings and `pith-pipeline config` are built from
`SETTINGS`; modules deep inside take the value as a parameter and, when they are not
given one, ask `from_env` here, the only module that reads `PITH_*` variables.

Standard library only: the DAG files import it while the scheduler parses them, and
the Airflow Variable lookup is passed in (`variable=`), so this module imports no
Airflow. `AWS_*` variables stay boto3's business; `aws_environment` only lists them,
masked, for `pith-pipeline config`.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from pith_pipeline.errors import TerminalError

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
    #: the range of a number (`number`, `integer`), checked wherever it is read
    minimum: float | None = None
    maximum: float | None = None

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
    Setting("cert_hours", "PITH_CERT_HOURS", "48", "Hours a per-run certified key is valid."),
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
    ),
    Setting("worker_chunk", "PITH_WORKER_CHUNK", "500", "Records per message to a worker (tuning)."),
    Setting(
        "io_concurrency",
        "PITH_IO_CONCURRENCY",
        None,
        "Papers published at once per process, each its own requests in their usual order.",
        default_text="32 on S3, 1 for a directory",
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
    ),
    Setting("lease_ttl", "PITH_LEASE_TTL", "120", "Seconds a writer lease lasts without renewal."),
    Setting(
        "local_fsync",
        "PITH_LOCAL_FSYNC",
        "1",
        "0 leaves flushing of a local store to the OS (benchmarks and scratch stores).",
    ),
    Setting(
        "snapshot_chunk_bytes",
        "PITH_SNAPSHOT_CHUNK_BYTES",
        str(64 * 1024 * 1024),
        "Smallest byte range of a snapshot file one DAG task builds.",
        minimum=1,
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
    ),
    # -- Airflow retries
    Setting(
        "retries",
        "PITH_RETRIES",
        "3",
        "Retries of a failed DAG task (terminal errors are not retried).",
        minimum=0,
        maximum=100,
    ),
    Setting(
        "retry_delay_seconds",
        "PITH_RETRY_DELAY_SECONDS",
        "60",
        "First delay before a DAG task's retry; doubles up to an hour.",
        minimum=0,
        maximum=86400,
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


@dataclass(frozen=True, slots=True)
class Resolved:
    """A setting's value and where it came from (`source` in `SOURCES`; `origin` names
    the flag, Variable or environment variable that gave it)."""

    setting: Setting
    value: str | None
    source: str
    origin: str = ""

    @property
    def shown(self) -> str:
        """The value as it may be printed: secrets masked, unset as "(unset)"."""
        return mask(self.setting, self.value)


#: The flags of the command being run (`given`): the first step of the rule for code
#: that the command reaches without a parameter for them.
_GIVEN: ContextVar[Mapping[str, str] | None] = ContextVar("pith_pipeline_config_given", default=None)


@contextmanager
def given(**flags: str | None) -> Iterator[None]:
    """Within the block, `resolve` sees these flags as given on the command line.

    Why: a flag such as `--log-signer` is needed where a command's run ends deep
    inside (`tlog.pipeline.log_run`). It used to travel there by writing
    `os.environ`, which outlived the command and leaked into every child process;
    this scope ends with the block and stays in this thread.
    """
    unknown = sorted(set(flags) - set(BY_NAME))
    if unknown:
        raise KeyError(f"not settings: {', '.join(unknown)}")
    token = _GIVEN.set({**(_GIVEN.get() or {}), **{k: v for k, v in flags.items() if v}})
    try:
        yield
    finally:
        _GIVEN.reset(token)


def resolve(
    name: str,
    *,
    flag: str | None = None,
    variable: Variable | None = None,
    env: Mapping[str, str] | None = None,
) -> Resolved:
    """Setting `name` by the one rule: flag > Airflow Variable > environment > default."""
    s = BY_NAME[name]
    flag = flag or (_GIVEN.get() or {}).get(name)
    if flag:
        return Resolved(s, flag, "flag", s.flag)
    if variable is not None:
        value = variable(s.env)
        if value:
            return Resolved(s, value, "variable", s.env)
    environ = os.environ if env is None else env
    for var in s.envs:
        value = environ.get(var)
        if value:
            return Resolved(s, value, "env", var)
    return Resolved(s, s.default, "default")


def resolve_all(
    flags: Mapping[str, str | None] | None = None,
    *,
    variable: Variable | None = None,
    env: Mapping[str, str] | None = None,
    names: Iterable[str] | None = None,
) -> list[Resolved]:
    """Every setting (or those `names`), in table order."""
    flags = flags or {}
    wanted = [s.name for s in SETTINGS] if names is None else list(names)
    return [resolve(n, flag=flags.get(n), variable=variable, env=env) for n in wanted]


def from_env(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """Setting `name` from the running command's flags (`given`), the environment, else
    its default: for modules deep inside that were given no value by their caller."""
    return resolve(name, env=env).value


class SettingError(TerminalError):
    """A setting whose value cannot be used: names the variable and what it expects."""


def _where(r: Resolved) -> str:
    return r.origin or r.setting.env


def _range(s: Setting) -> str:
    if s.minimum is not None and s.maximum is not None:
        return f" from {s.minimum:g} to {s.maximum:g}"
    if s.minimum is not None:
        return f" of at least {s.minimum:g}"
    return f" of at most {s.maximum:g}" if s.maximum is not None else ""


class LeaseConfigError(SettingError):
    """A shard selection, lease TTL or wait that cannot be used: a usage error (exit 2)."""

    exit_code = 2


def wait_seconds(value: str | float, where: str) -> float:
    """How long to wait for a busy lease (`--wait`, `PITH_LEASE_WAIT`): the setting's
    number rule (`parse_number`: finite, 0 to a week), as a usage error (exit 2).

    Why so strict: `nan` compares false with every deadline, so a wait of `nan`
    ends at once in one loop and never in another; `inf` or a negative number is no
    clearer. Every reader of the setting goes through here (the `--wait` option's
    type, the task settings), so each refuses the same values with the same line,
    `where` naming the option or variable.
    """
    try:
        return parse_number("lease_wait", str(value), where)
    except SettingError as exc:
        raise LeaseConfigError(str(exc)) from None


def parse_number(name: str, text: str | None, where: str | None = None, *, whole: bool = False) -> float:
    """`text` as setting `name`'s number: finite and in the row's range, else one
    `SettingError` naming the variable (`where`), the value and what is accepted.

    Why finite: nan passes every comparison, so it slipped through range checks, and
    inf or 1e300 overflowed the timestamps and durations they were added to."""
    s = BY_NAME[name]
    where = where or s.env
    what = ("a whole number" if whole else "a finite number") + _range(s)
    try:
        value = float(int(text or "")) if whole else float(text or "")
    except (ValueError, OverflowError):
        raise SettingError(f"{where}={text!r}: expected {what}") from None
    too_small = s.minimum is not None and value < s.minimum
    too_large = s.maximum is not None and value > s.maximum
    if not math.isfinite(value) or too_small or too_large:
        raise SettingError(f"{where}={text!r}: expected {what}")
    return value


def number(name: str, env: Mapping[str, str] | None = None) -> float:
    """Setting `name` (environment, else default) as a number; a bad value is one clear line."""
    r = resolve(name, env=env)
    return parse_number(name, r.value, _where(r))


def integer(name: str, env: Mapping[str, str] | None = None) -> int:
    """Setting `name` (environment, else default) as a whole number."""
    r = resolve(name, env=env)
    return int(parse_number(name, r.value, _where(r), whole=True))


_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def flag(name: str, env: Mapping[str, str] | None = None) -> bool:
    """Setting `name` as on or off: 1 or 0 (also true/false, yes/no, on/off, any case).

    Why strict: `PITH_LOCAL_FSYNC=maybe` (or `false`) was silently on, since anything
    but "0" was; a value that is not understood is one line naming the variable."""
    r = resolve(name, env=env)
    return parse_flag(name, r.value, _where(r))


def parse_flag(name: str, text: str | None, where: str) -> bool:
    """`text` as setting `name`'s on or off (`flag`'s rule); blank is the default."""
    value = (text or "").strip().lower() or (BY_NAME[name].default or "")  # blank: unset
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise SettingError(f"{where}={text!r}: expected 1 or 0 (also true/false, yes/no, on/off)")


_SPEC_SCHEME = re.compile(r"^(file|kms|kms-envelope|certified):")


def mask(s: Setting, value: str | None) -> str:
    """`value` as it may be printed. A secret shows at most its signer scheme
    (`kms:****`), which says which back end without naming the key."""
    if not value:
        return "(unset)"
    if not s.secret:
        return value
    m = _SPEC_SCHEME.match(value)
    return f"{m.group(1)}:{MASK}" if m else MASK


#: AWS variables whose values say nothing secret; every other AWS_* is masked.
AWS_SHOWN = frozenset(
    {
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_PROFILE",
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_S3",
        "AWS_ENDPOINT_URL_KMS",
        "AWS_MAX_ATTEMPTS",
        "AWS_RETRY_MODE",
    }
)


def aws_environment(env: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """The AWS_* variables that are set, as (name, value shown): boto3 reads them
    itself; they are listed so `pith-pipeline config` shows the whole picture."""
    environ = os.environ if env is None else env
    return [
        (k, environ[k] if k in AWS_SHOWN else MASK)
        for k in sorted(environ)
        if k.startswith("AWS_") and environ[k]
    ]


# -- the settings of a DAG task (and of `pith-pipeline backfill`) -----------------

#: The settings a task reads (a field of `Settings` each), by the rule of `resolve`.
TASK_SETTINGS = (
    "store",
    "signer",
    "oai_url",
    "base_url",
    "registry_name",
    "signer_id",
    "oai_min_interval",
    "lease_wait",
    "log_signer",
    "keep_log",
)

#: Seconds a task waits for another writer of the same papers before failing (and
#: being retried by Airflow): long, because waiting is the normal case when
#: `backfill create` runs windows at once.
DEFAULT_TASK_LEASE_WAIT = 1800.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """Where to read, write and sign; from PITH_* variables (see `load_settings`).

    The defaults are the table's (`pith_pipeline.config.SETTINGS`)."""

    store: str = DEFAULT_STORE
    signer: str | None = None
    oai_url: str = DEFAULT_OAI_URL
    base_url: str = DEFAULT_BASE_URL
    registry_name: str = DEFAULT_REGISTRY_NAME
    signer_id: str = DEFAULT_SIGNER_ID
    #: Seconds between OAI-PMH requests; unset means arXiv's policy (3 s). Lower it
    #: only for a local mirror or test server.
    oai_min_interval: str | None = None
    #: Seconds to wait for a busy writer lease (unset: DEFAULT_TASK_LEASE_WAIT).
    lease_wait: str | None = None
    #: The transparency log's key spec (unset: the file beside the registry key's,
    #: `tlog.run_log`); a secret, like `signer`.
    log_signer: str | None = None
    #: "0": no transparency log for a new store (`keeps_log`).
    keep_log: str | None = "1"

    @property
    def keeps_log(self) -> bool:
        """PITH_KEEP_LOG as on or off (checked: a value that is not understood is one line)."""
        return parse_flag("keep_log", self.keep_log, env_name("keep_log"))

    @property
    def lease_wait_seconds(self) -> float:
        """PITH_LEASE_WAIT in seconds (checked by `storage.lease.wait_seconds`, the one
        rule for `--wait` too: a bad value is one line naming it)."""
        if not self.lease_wait:
            return DEFAULT_TASK_LEASE_WAIT
        return wait_seconds(self.lease_wait, env_name("lease_wait"))

    @property
    def oai_min_interval_seconds(self) -> float | None:
        """PITH_OAI_MIN_INTERVAL in seconds, or None for arXiv's policy (checked)."""
        return parse_number("oai_min_interval", self.oai_min_interval) if self.oai_min_interval else None

    def __repr__(self) -> str:  # the signer spec may name a key file or KMS key: keep it out
        return (
            f"Settings(store={self.store!r}, oai_url={self.oai_url!r}, "
            f"base_url={self.base_url!r}, signer={'set' if self.signer else 'unset'})"
        )


def load_settings(
    env: Mapping[str, str] | None = None, *, variable: Variable | None = None, **overrides: str | None
) -> Settings:
    """Settings by the one rule (`resolve`): `overrides` (the flags), then the Airflow
    Variable lookup `variable` (tasks pass one: `airflow_tasks.load_settings`), then
    the environment, then the table's defaults.

    The names are the same everywhere: `PITH_STORE`, `PITH_SIGNER`, `PITH_OAI_URL`,
    `PITH_BASE_URL`, `PITH_REGISTRY_NAME`, `PITH_SIGNER_ID`, ...; an Airflow Variable
    of that name wins over the worker's environment.
    """
    resolved = {
        name: resolve(name, flag=overrides.get(name), variable=variable, env=env) for name in TASK_SETTINGS
    }
    for name in ("oai_min_interval", "lease_wait"):  # checked here, naming where they came from
        r = resolved[name]
        if r.value:
            parse_number(name, r.value, _where(r))
    parse_flag("keep_log", resolved["keep_log"].value, _where(resolved["keep_log"]))
    values: dict[str, Any] = {name: r.value for name, r in resolved.items()}
    return Settings(**values)


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


if __name__ == "__main__":  # python -m pith_pipeline.config > table for docs/pages/configuration.md
    print(markdown_table(), end="")
