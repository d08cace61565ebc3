"""Which log key a run uses: the transparency log is on by default.

A store that nobody can audit is the wrong default, so every publishing path (the
`ingest`, `build` and `backfill` commands, the Airflow tasks, `log sync`) decides
at its start, once, in `prepare_run_log`:

- a log key given (`--log-signer`, `PITH_LOG_SIGNER`, an Airflow Variable) is used;
- otherwise the log key is the file `pith-log-private-key.json` beside the
  registry's key file (`./pith-keys/` for the embedded default). A **new store** (no
  key document yet: nothing was ever published there) gets that key made on first
  use, exactly as `ingest` makes the registry key: mode 0600 in a 0700 directory,
  never inside the store, its seed never printed. A store that keeps a log uses the
  file when it is there, and otherwise stops before publishing anything, saying
  where the key was looked for and how to give it;
- a store that exists and keeps no log stays without one (a run never starts a log
  by itself over events it did not publish); the run says once, in one line, the
  exact command that starts one (`log rebuild`);
- `--no-log` / `PITH_KEEP_LOG=0` opts out: a new store is made without a log and no
  one is told to start one. A store that keeps a log refuses it (its log would miss
  the run's events).

A registry key with no local file (`kms:`, `kms-envelope:`, `certified:kms:`) has no
directory to put a log key beside, and making a plaintext key on whatever machine
runs the task would undo the custody the operator chose: a new store signed that way
needs its log key given (an Ed25519 KMS key, `kms:alias/...`, or a key file), or
`--no-log`; the run says so before anything is published.

The decision reaches the end of the run (`tlog.pipeline.log_run`) as the run's
log key spec (`RunLog.spec`), and the key document names the log key from
the run's first write on (`Publisher.log_key`), so a run killed before its append
still leaves a store that knows it keeps a log.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pith_pipeline.config import Settings, env_name
from pith_pipeline.errors import KeyFileError, TerminalError
from pith_pipeline.signing.guard import local_store_root, refuse_key_file_inside, spec_key_file
from pith_pipeline.signing.local import DEFAULT_KEY_DIR, LOG_KEY_FILE, create_key_file_once
from pith_pipeline.storage.base import Store
from pith_pipeline.tlog.pipeline import (
    KEY_DOCUMENT,
    LOG_SIGNER_ENV,
    LogNotConfiguredError,
    current_checkpoint,
    has_had_log,
    kept_checkpoint,
    key_document,
    log_key_member,
    open_log_signer,
    refuse_unlogged_run,
)

KEEP_LOG_ENV = env_name("keep_log")
NO_LOG = f"--no-log ({KEEP_LOG_ENV}=0)"


class LogChoiceError(TerminalError):
    """A run's log settings that contradict each other or the store: a usage error."""

    exit_code = 2


@dataclass(frozen=True, slots=True)
class RunLog:
    """What a run does about the log: `spec`, the log key's signer spec (None: the run
    keeps no log); `member`, the key document's `log` member for that key (None when
    no log); `generated`, the key file made by this run, if any."""

    spec: str | None
    member: dict[str, Any] | None = None
    generated: Path | None = None


def default_log_key(signer_spec: str | None) -> Path | None:
    """The log key file beside the registry key's file: `<its directory>/pith-log-private-key.json`.

    `signer_spec` None: the embedded default's directory (`./pith-keys/`). A signer
    with no local key file (KMS, a KMS envelope) has none: None."""
    if not signer_spec:
        return DEFAULT_KEY_DIR / LOG_KEY_FILE
    path = spec_key_file(signer_spec)
    return None if path is None else path.parent / LOG_KEY_FILE


def is_new_store(store: Store) -> bool:
    """Nothing was ever published here: no key document (every run that publishes
    writes it before its first event)."""
    return not store.exists(KEY_DOCUMENT)


_told: set[str] = set()
_told_lock = threading.Lock()


def start_a_log_command(store: Store, signer_spec: str | None) -> str:
    """The exact command that starts a log on `store` (`log rebuild` makes a missing
    file key it is given)."""
    path = default_log_key(signer_spec)
    key = f"file:{path}" if path is not None else "SPEC"
    return f"pith-pipeline log rebuild --store {store.url} --log-signer {key}"


def no_log_notice(store: Store, signer_spec: str | None) -> str:
    """The one line a run on an existing store without a log prints."""
    path = default_log_key(signer_spec)
    what = (
        ""
        if path is not None
        else " (SPEC: the log's own key: an Ed25519 KMS key kms:ALIAS, or file:PATH, made when missing)"
    )
    return (
        f"note: {store.url} keeps no transparency log, so nobody can audit its history; start one "
        f"with `{start_a_log_command(store, signer_spec)}`{what}, or set {KEEP_LOG_ENV}=0 to run "
        "without one and not be told"
    )


def _say_once(store: Store, line: str, notice: Callable[[str], None] | None) -> None:
    """`notice(line)` the first time this process runs on `store`: a backfill's
    windows and chunks do not repeat it."""
    if notice is None:
        return
    with _told_lock:
        if store.url in _told:
            return
        _told.add(store.url)
    notice(line)


def prepare_run_log(
    store: Store,
    signer_spec: str | None,
    *,
    base_url: str = "",
    explicit: str | None = None,
    keep: bool = True,
    generate: bool = True,
    notice: Callable[[str], None] | None = None,
    origin: str | None = None,
) -> RunLog:
    """Decide, before a run publishes anything, which log key it uses (module docstring).

    `signer_spec`: the registry key's spec (its file's directory holds the log key);
    `explicit`: the log key given, if any; `keep`: False for `--no-log`; `generate`:
    whether this step may make the key of a new store (a run's first step does; its
    last, which only appends, finds it); `origin`: the log's origin line
    (`Settings.log_origin`; None: the key document's or the default); `notice`: where the one-line notes go (a
    key made, a store without a log). Raises, in one line and before any write: a
    store that keeps a log and no key for it (or a log that was lost or rolled back:
    the recovery), a log key other than the one the store's log is signed with, a
    new store with no place for a log key, `--no-log` on a store with a log.
    """
    had = has_had_log(store)
    if explicit and not keep:
        raise LogChoiceError(f"--log-signer ({LOG_SIGNER_ENV}) and {NO_LOG} contradict each other; give one")
    if not keep:
        if had:
            raise LogChoiceError(
                f"{store.url} keeps a transparency log; {NO_LOG} cannot turn it off (the log "
                "would miss this run's events): run without it"
            )
        return RunLog(None)
    spec, made = explicit, None
    if not spec and not had and not generate and is_new_store(store):
        return RunLog(None)  # nothing was published: no log to append to yet
    if not spec:
        path = default_log_key(signer_spec)
        if had:
            if path is None or not path.is_file():
                refuse_unlogged_run(store, looked_at=path)
            spec = f"file:{path}"
        elif not is_new_store(store):
            _say_once(store, no_log_notice(store, signer_spec), notice)
            return RunLog(None)
        elif path is None:
            raise LogNotConfiguredError(
                f"a new store keeps a transparency log, signed by a key of its own, and this "
                f"registry key has no directory to keep one in: give it with --log-signer SPEC "
                f"({LOG_SIGNER_ENV}; an Ed25519 KMS key kms:ALIAS, or file:PATH made with "
                f"`pith-pipeline keys generate --out DIR`), or run with {NO_LOG} for a store "
                "without a log"
            )
        else:
            if generate and create_key_file_once(path, "pith-log"):
                made = path
                if notice is not None:
                    notice(
                        f"no log key given (--log-signer, {LOG_SIGNER_ENV}): generated {path} "
                        "(mode 0600; keep it secret, and keep it with the registry key), the key "
                        "of this store's transparency log"
                    )
            elif not path.is_file():
                raise KeyFileError(
                    f"the log key {path} does not exist yet (the run's first step makes it); "
                    f"give the log key with --log-signer or {LOG_SIGNER_ENV}"
                )
            spec = f"file:{path}"
    key_url = f"{base_url.rstrip('/')}/{KEY_DOCUMENT}" if base_url else ""
    log = open_log_signer(spec, store, origin, key_url=key_url)
    listed = key_document(store).get("log")
    named = listed.get("vkey") if isinstance(listed, dict) else None
    if named and named != log.verifier.vkey:
        raise KeyFileError(
            f"this store's log is signed by {named}; the log key {spec} is another one "
            f"({log.verifier.vkey}): give the store's log key (a log keeps its key)"
        )
    if had:  # never publish onto a log that was lost or rolled back: name the recovery first
        kept_checkpoint(store, log.verifier, current_checkpoint(store, log.verifier))
    return RunLog(spec, log_key_member(log), made)


def log_key_for_command(
    store: Store,
    explicit: str | None,
    *,
    create: bool,
    notice: Callable[[str], None],
    registry_signer: str | None = None,
) -> str:
    """The log key spec of `log sync` / `log rebuild`: the one given, else the file
    beside the registry key (`registry_signer`'s key file: the `signer` setting the
    command resolved; else `./pith-keys/`).

    `create` (`log rebuild`): a `file:` key that is missing is made there, for a
    store that has never had a log (this is how an existing store starts one, the
    command a run without a log names); for a store that has one it must exist."""
    if explicit:
        spec, path = explicit, spec_key_file(explicit)
    else:
        path = default_log_key(registry_signer)
        if path is None:
            raise LogNotConfiguredError(
                f"no log key given: give it with --log-signer SPEC or {LOG_SIGNER_ENV} (the "
                "registry key is not a file, so there is no default beside it)"
            )
        spec = f"file:{path}"
    if path is not None and not path.exists():
        if create and not has_had_log(store):
            root = local_store_root(store)
            if root is not None:  # checked before a key is made there: it would be served
                refuse_key_file_inside(path.absolute(), root)
            if create_key_file_once(path, "pith-log"):
                notice(
                    f"generated {path} (mode 0600; keep it secret), the key of this store's transparency log"
                )
        elif not explicit:
            raise LogNotConfiguredError(
                f"no log key given (--log-signer, {LOG_SIGNER_ENV}), and none at {path}, where "
                "commands look for it beside the registry key: give the store's log key"
            )
    return spec


def run_log_of(
    settings: Settings,
    store: Store,
    *,
    generate: bool = True,
    notice: Callable[[str], None] | None = None,
) -> RunLog:
    """`prepare_run_log` with what `settings` say: the registry key (whose directory
    holds the log key), base URL, log signer, keep-log and origin. The one place a
    run's or a window's log key is chosen from its settings (`runs.run.Run`, the
    window's last step)."""
    return prepare_run_log(
        store,
        settings.signer,
        base_url=settings.base_url,
        explicit=settings.log_signer,
        keep=settings.keep_log,
        generate=generate,
        notice=notice,
        origin=settings.log_origin,
    )
