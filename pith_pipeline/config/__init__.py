"""Every setting of the pipeline in one table, the one rule that resolves them, and
the typed `Settings` a run is given.

A setting is found, first match wins, as:

1. a command-line flag (`--store`);
2. an Airflow Variable of the setting's environment name (DAG tasks only, so an
   operator can change a deployment from the Airflow UI);
3. the environment (`PITH_STORE`, then the setting's older aliases);
4. the default in the table.

An empty value counts as unset at every step, as click treats an empty environment
variable. The edges (a command, a DAG task) resolve the table once with
`load_settings` into a `Settings`, whose numbers are numbers and on/off settings
bools, checked as they are read (a bad value is one line naming the variable), and
pass it down; the modules below take the values they need as parameters. This is
the only module that reads `PITH_*` variables.

Standard library only: the DAG files import it while the scheduler parses them, and
the Airflow Variable lookup is passed in (`variable=`), so this module imports no
Airflow. Why not pydantic-settings: measured, it adds about 100 ms to every command's
start (`python -X importtime`: 108 ms for `pydantic_settings` against 14 ms for this
module, the CLI's whole import being 150 ms), its errors are several lines without
the variable's name, and it cannot say where a value came from, which
`pith-pipeline config` prints. `AWS_*` variables stay boto3's business;
`aws_environment` only lists them, masked, for `pith-pipeline config`.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pith_pipeline.config.table import (
    BY_ENV,
    BY_NAME,
    DEFAULT_API_URL,
    DEFAULT_BASE_URL,
    DEFAULT_OAI_URL,
    DEFAULT_REGISTRY_NAME,
    DEFAULT_SIGNER_ID,
    DEFAULT_STORE,
    MASK,
    SETTINGS,
    SOURCES,
    Setting,
    Variable,
    env_name,
    markdown_table,
    setting,
)
from pith_pipeline.errors import LeaseConfigError, SettingError

__all__ = [
    "BY_ENV",
    "BY_NAME",
    "DEFAULT_API_URL",
    "DEFAULT_BASE_URL",
    "DEFAULT_OAI_URL",
    "DEFAULT_REGISTRY_NAME",
    "DEFAULT_SIGNER_ID",
    "DEFAULT_STORE",
    "DEFAULT_TASK_LEASE_WAIT",
    "MASK",
    "SETTINGS",
    "SOURCES",
    "TASK_SETTINGS",
    "LeaseConfigError",
    "Resolved",
    "Setting",
    "SettingError",
    "Settings",
    "Variable",
    "aws_environment",
    "env_name",
    "flag",
    "integer",
    "load_settings",
    "markdown_table",
    "mask",
    "number",
    "parse_flag",
    "parse_number",
    "parse_value",
    "resolve",
    "resolve_all",
    "setting",
    "wait_seconds",
]


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


def resolve(
    name: str,
    *,
    flag: str | None = None,
    variable: Variable | None = None,
    env: Mapping[str, str] | None = None,
) -> Resolved:
    """Setting `name` by the one rule: flag > Airflow Variable > environment > default."""
    s = BY_NAME[name]
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


def _where(r: Resolved) -> str:
    return r.origin or r.setting.env


def _range(s: Setting) -> str:
    top = f"at most {s.maximum:g}" if s.maximum is not None else ""
    if s.positive:
        return " above 0" + (f" and {top}" if top else "")
    if s.minimum is not None and s.maximum is not None:
        return f" from {s.minimum:g} to {s.maximum:g}"
    if s.minimum is not None:
        return f" of at least {s.minimum:g}"
    return f" of {top}" if top else ""


def wait_seconds(value: str | float, where: str) -> float:
    """How long to wait for a busy lease (`--wait`, `PITH_LEASE_WAIT`): the setting's
    number rule (`parse_number`: finite, 0 to a week), as a usage error (exit 2).

    Why so strict: `nan` compares false with every deadline, so a wait of `nan`
    ends at once in one loop and never in another; `inf` or a negative number is no
    clearer. Every reader of the setting goes through here (the `--wait` option's
    type, `Settings`), so each refuses the same values with the same line, `where`
    naming the option or variable.
    """
    try:
        return parse_number("lease_wait", str(value), where)
    except SettingError as exc:
        raise LeaseConfigError(str(exc)) from None


def parse_number(name: str, text: str | None, where: str | None = None, *, whole: bool = False) -> float:
    """`text` as setting `name`'s number: finite and in the row's range, else one
    `SettingError` naming the variable (`where`), the value and what is accepted.

    Why finite: nan passes every comparison, so it would slip through a range check,
    and inf or 1e300 overflow the timestamps and durations they are added to."""
    s = BY_NAME[name]
    where = where or s.env
    what = ("a whole number" if whole else "a finite number") + _range(s)
    try:
        value = float(int(text or "")) if whole else float(text or "")
    except (ValueError, OverflowError):
        raise SettingError(f"{where}={text!r}: expected {what}") from None
    too_small = (s.minimum is not None and value < s.minimum) or (s.positive and value <= 0)
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

    Why strict: a value that is not understood (`PITH_LOCAL_FSYNC=maybe`) would
    otherwise be silently on or off; it is one line naming the variable."""
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


#: A setting's value once read by its row's `kind`.
Value = str | float | int | bool | None


def parse_value(name: str, value: Value, where: str | None = None) -> Value:
    """`value` of setting `name` as its row's kind reads it (text, finite number, whole
    number, on/off): text as the environment gives it is parsed, a typed value checked
    by the same rule. Blank text is the default. A bad value is one `SettingError`
    naming `where` (the flag, Variable or environment variable; else the variable)."""
    s = BY_NAME[name]
    where = where or s.env
    text = value if isinstance(value, str) else None
    if text is not None and not text.strip():
        value = text = s.default
    if value is None:
        return None
    if s.kind == "flag":
        return value if isinstance(value, bool) else parse_flag(name, str(value), where)
    if s.kind == "integer":
        return int(parse_number(name, str(value), where, whole=True))
    if name == "lease_wait":  # the lease rule: a usage error, as for --wait
        return wait_seconds(value, where)
    if s.kind == "number":
        return parse_number(name, str(value), where)
    return str(value)


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


# -- the settings of a run: resolved once at the edge, passed down ---------------

#: The settings an Airflow Variable may set (tasks look each up; the rest come from
#: the environment, so a task asks Airflow only for what an operator changes there).
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
    """Every setting of the table, typed: what a command or DAG task resolved once
    (`load_settings`) and passes down. A field is None when unset and its row has no
    default (the code that uses it then does what the row's `default_text` says).

    A value given as text (as the environment gives it) is read by its row's rule
    when the object is made (`parse_value`), so a `Settings` never holds a number or
    on/off value that was not checked; a bad one is one line naming the variable."""

    store: str = DEFAULT_STORE
    signer: str | None = None
    oai_url: str = DEFAULT_OAI_URL
    arxiv_api_url: str = DEFAULT_API_URL
    #: Seconds between OAI-PMH requests; None: arXiv's policy (3 s).
    oai_min_interval: float | None = None
    base_url: str = DEFAULT_BASE_URL
    registry_name: str = DEFAULT_REGISTRY_NAME
    signer_id: str = DEFAULT_SIGNER_ID
    #: The transparency log's key spec; None: the file beside the registry key's
    #: (`tlog.run_log`). A secret, like `signer`.
    log_signer: str | None = None
    #: False: no transparency log for a new store (`--no-log`).
    keep_log: bool = True
    log_origin: str | None = None
    log_vkey: str | None = None
    envelope_kms_key: str | None = None
    cert_hours: float = 48.0
    run_id: str | None = None
    workers: int | None = None
    worker_chunk: int = 500
    io_concurrency: int | None = None
    shards: str | None = None
    #: Seconds to wait for a busy writer lease; None: the caller's default
    #: (`lease_wait_seconds` in tasks, 0 for commands).
    lease_wait: float | None = None
    lease_ttl: float = 120.0
    local_fsync: bool = True
    snapshot_chunk_bytes: int = 64 * 1024 * 1024
    user_agent: str | None = None
    contact: str | None = None
    politeness_dir: str | None = None
    traceback: bool = False
    retries: int = 3
    retry_delay_seconds: float = 60.0

    def __post_init__(self) -> None:
        for s in SETTINGS:
            value = getattr(self, s.name)
            if isinstance(value, str) or (s.kind != "text" and value is not None):
                object.__setattr__(self, s.name, parse_value(s.name, value))

    @property
    def keeps_log(self) -> bool:
        """Whether a new store keeps a transparency log (`keep_log`)."""
        return self.keep_log

    @property
    def store_options(self) -> dict[str, Any]:
        """How a store is opened with these settings: `open_store(settings.store,
        **settings.store_options)` (its `fsync`, its leases' `lease_ttl`). A dict, so
        this table, which imports nothing of the package, need not know the stores."""
        return {"fsync": self.local_fsync, "lease_ttl": self.lease_ttl}

    @property
    def lease_wait_seconds(self) -> float:
        """Seconds a DAG task waits for a busy writer lease (unset: DEFAULT_TASK_LEASE_WAIT)."""
        return DEFAULT_TASK_LEASE_WAIT if self.lease_wait is None else self.lease_wait

    def __repr__(self) -> str:  # the signer specs may name a key file or KMS key: keep them out
        return (
            f"Settings(store={self.store!r}, oai_url={self.oai_url!r}, "
            f"base_url={self.base_url!r}, signer={'set' if self.signer else 'unset'})"
        )


def load_settings(
    env: Mapping[str, str] | None = None, *, variable: Variable | None = None, **flags: Value
) -> Settings:
    """Every setting by the one rule (`resolve`): `flags` (the command's options: text,
    or the value click already read), then the Airflow Variable lookup `variable` for
    `TASK_SETTINGS` (tasks pass one: `airflow_tasks.load_settings`), then the
    environment (`env`, else os.environ), then the table's defaults.

    Each value is read here by its row's rule, naming where it came from when it is
    bad (`PITH_LEASE_WAIT='soon': expected ...`, or the Airflow Variable, or the flag).
    """
    unknown = sorted(set(flags) - set(BY_NAME))
    if unknown:
        raise KeyError(f"not settings: {', '.join(unknown)}")
    values: dict[str, Any] = {}
    for s in SETTINGS:
        given_value = flags.get(s.name)
        if given_value is not None and not isinstance(given_value, str):
            values[s.name] = parse_value(s.name, given_value, s.flag)
            continue
        lookup = variable if s.name in TASK_SETTINGS else None
        r = resolve(s.name, flag=given_value, variable=lookup, env=env)
        values[s.name] = parse_value(s.name, r.value, _where(r))
    return Settings(**values)
