"""One configuration: one table of settings, one resolution rule, one place that reads
`PITH_*` variables, and `pith-pipeline config` that shows them with secrets masked."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from pith_pipeline import config
from pith_pipeline.config import BY_NAME, SETTINGS, SettingError, resolve

PACKAGE = Path(config.__file__).parent.parent
DOC = PACKAGE.parent / "docs" / "pages" / "configuration.md"
SECRET = "s3cr3t-key-material-0123456789"


# -- the rule -----------------------------------------------------------------------
def test_flag_beats_variable_beats_environment_beats_default() -> None:
    env = {"PITH_STORE": "/from/env"}
    variables = {"PITH_STORE": "/from/variable"}
    lookup = variables.get
    assert resolve("store", flag="/from/flag", variable=lookup, env=env).source == "flag"
    assert resolve("store", flag="/from/flag", variable=lookup, env=env).value == "/from/flag"
    r = resolve("store", variable=lookup, env=env)
    assert (r.value, r.source, r.origin) == ("/from/variable", "variable", "PITH_STORE")
    r = resolve("store", variable=lambda _n: None, env=env)
    assert (r.value, r.source, r.origin) == ("/from/env", "env", "PITH_STORE")
    r = resolve("store", env={})
    assert (r.value, r.source) == (config.DEFAULT_STORE, "default")


def test_an_empty_value_counts_as_unset() -> None:
    r = resolve("store", flag="", variable=lambda _n: "", env={"PITH_STORE": ""})
    assert (r.value, r.source) == (config.DEFAULT_STORE, "default")


def test_an_alias_is_read_after_the_name() -> None:
    assert resolve("signer", env={"PITH_KEY": "file:old"}).origin == "PITH_KEY"
    r = resolve("signer", env={"PITH_KEY": "file:old", "PITH_SIGNER": "file:new"})
    assert (r.value, r.origin) == ("file:new", "PITH_SIGNER")


def test_a_bad_number_is_one_line_naming_the_variable() -> None:
    with pytest.raises(SettingError, match=r"^PITH_RETRIES='many': expected a whole number from 0 to 100$"):
        config.integer("retries", {"PITH_RETRIES": "many"})
    assert config.number("retry_delay_seconds", {}) == 60.0


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "1e999"])
def test_nan_and_inf_settings_are_refused_in_one_line(value: str) -> None:
    """`float()` reads them; as seconds they never waited (nan), overflowed a timedelta
    (inf) or paced arXiv at no interval at all: every float setting refuses them."""
    with pytest.raises(SettingError, match=r"^PITH_RETRY_DELAY_SECONDS=.*finite"):
        config.number("retry_delay_seconds", {"PITH_RETRY_DELAY_SECONDS": value})
    with pytest.raises(SettingError, match=r"^PITH_LEASE_WAIT=.*finite"):
        _ = config.load_settings(env={"PITH_LEASE_WAIT": value}).lease_wait_seconds
    with pytest.raises(SettingError, match=r"^PITH_OAI_MIN_INTERVAL=.*finite"):
        _ = config.load_settings(env={"PITH_OAI_MIN_INTERVAL": value}).oai_min_interval


def test_seconds_settings_are_read_as_numbers() -> None:
    settings = config.load_settings(env={"PITH_LEASE_WAIT": "2.5", "PITH_OAI_MIN_INTERVAL": "0"})
    assert (settings.lease_wait_seconds, settings.oai_min_interval) == (2.5, 0.0)
    defaults = config.load_settings(env={})
    assert defaults.lease_wait_seconds == config.DEFAULT_TASK_LEASE_WAIT
    assert defaults.oai_min_interval is None
    with pytest.raises(SettingError, match=r"^PITH_LEASE_WAIT='soon': expected"):
        _ = config.load_settings(env={"PITH_LEASE_WAIT": "soon"}).lease_wait_seconds
    with pytest.raises(SettingError, match=r"^PITH_LEASE_WAIT='-1': "):
        _ = config.load_settings(env={"PITH_LEASE_WAIT": "-1"}).lease_wait_seconds


# -- the typed settings -------------------------------------------------------------
def test_settings_has_a_typed_field_for_every_row_with_the_row_default() -> None:
    """One `Settings` for every setting: its field defaults are the table's, read by the
    row's rule (numbers as numbers, on/off as bools), and loading with nothing set
    gives the same object."""
    fields = config.Settings.__dataclass_fields__
    assert list(fields) == [s.name for s in SETTINGS]
    made = config.Settings()
    for s in SETTINGS:
        assert getattr(made, s.name) == config.parse_value(s.name, s.default), s.name
    assert config.load_settings(env={}) == made
    assert (made.keep_log, made.retries, made.cert_hours, made.lease_ttl) == (True, 3, 48.0, 120.0)


def test_loaded_settings_are_typed() -> None:
    env = {
        "PITH_WORKERS": "4",
        "PITH_KEEP_LOG": "off",
        "PITH_LEASE_WAIT": "2.5",
        "PITH_SNAPSHOT_CHUNK_BYTES": "1024",
        "PITH_LOG_SIGNER": "file:/keys/log.json",
    }
    s = config.load_settings(env=env, keep_log=None)
    assert (s.workers, s.keep_log, s.lease_wait, s.snapshot_chunk_bytes) == (4, False, 2.5, 1024)
    assert s.log_signer == "file:/keys/log.json"
    assert config.load_settings(env=env, log_signer="file:/flag.json", keep_log=True).log_signer == (
        "file:/flag.json"
    )
    assert config.load_settings(env=env, keep_log=True).keep_log is True  # a flag click read wins


@pytest.mark.parametrize(
    ("source", "where"),
    [("env", "PITH_WORKERS"), ("variable", "PITH_LEASE_WAIT"), ("flag", "--cert-hours")],
)
def test_a_bad_value_names_where_it_came_from_in_one_line(source: str, where: str) -> None:
    if source == "env":
        kwargs: dict[str, object] = {"env": {"PITH_WORKERS": "many"}}
    elif source == "variable":
        kwargs = {"env": {}, "variable": {"PITH_LEASE_WAIT": "soon"}.get}
    else:
        kwargs = {"env": {}, "cert_hours": "0"}
    with pytest.raises(SettingError) as info:
        config.load_settings(**kwargs)  # type: ignore[arg-type]
    message = str(info.value)
    assert message.startswith(f"{where}=") and "\n" not in message and "expected" in message


def test_an_unknown_setting_is_refused() -> None:
    with pytest.raises(KeyError, match="not settings: stroe"):
        config.load_settings(env={}, stroe="/x")


def test_the_io_concurrency_range_is_the_stores() -> None:
    from pith_pipeline.storage.concurrency import MAX_IO_CONCURRENCY

    assert BY_NAME["io_concurrency"].maximum == MAX_IO_CONCURRENCY


def test_settings_repr_shows_no_secret() -> None:
    s = config.Settings(signer=f"file:{SECRET}", log_signer=f"kms:{SECRET}")
    assert SECRET not in repr(s) and SECRET not in str(s)


# -- masking ------------------------------------------------------------------------
@pytest.mark.parametrize("value", [f"file:/keys/{SECRET}.json", f"kms:alias/{SECRET}", f"/keys/{SECRET}"])
def test_a_secret_never_appears_masked(value: str) -> None:
    shown = config.mask(BY_NAME["signer"], value)
    assert SECRET not in shown and config.MASK in shown


def test_aws_secrets_are_masked_and_the_region_shown() -> None:
    env = {"AWS_SECRET_ACCESS_KEY": SECRET, "AWS_REGION": "eu-west-1", "X": "1"}
    shown = dict(config.aws_environment(env))
    assert shown == {"AWS_SECRET_ACCESS_KEY": config.MASK, "AWS_REGION": "eu-west-1"}


# -- one table, one reader ----------------------------------------------------------
def _package_sources() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_pith_variable_the_package_names_is_in_the_table() -> None:
    named: set[str] = set()
    for path in _package_sources():
        named |= set(re.findall(r"\bPITH_[A-Z_]+\b", path.read_text(encoding="utf-8")))
    named -= {"PITH_NUMBER"}  # a regular expression's name in core/pith_record.py, not a variable
    assert named, "the scan found nothing: it is not looking where it should"
    assert sorted(named - set(config.BY_ENV)) == []


def _pith_constants() -> dict[str, str]:
    """Module-level NAME = "PITH_..." constants anywhere in the package."""
    out: dict[str, str] = {}
    for path in _package_sources():
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                value = node.value.value
                if isinstance(value, str) and value.startswith("PITH_"):
                    out.update({t.id: value for t in node.targets if isinstance(t, ast.Name)})
    return out


def _env_reads(tree: ast.AST, constants: dict[str, str]) -> list[str]:
    """`x.get(V)`, `getenv(V)`, `x[V]` and `x.setdefault/pop(V)` for a PITH_ variable V."""

    def pith(arg: ast.expr) -> str | None:
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("PITH_"):
            return arg.value
        if isinstance(arg, ast.Name) and arg.id in constants:
            return constants[arg.id]
        return None

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in ("get", "getenv", "pop", "setdefault", "__getitem__") and (var := pith(node.args[0])):
                found.append(f"line {node.lineno}: {name}({var})")
        if isinstance(node, ast.Subscript) and (var := pith(node.slice)):
            found.append(f"line {node.lineno}: [{var}]")
    return found


def test_only_config_reads_pith_variables() -> None:
    constants = _pith_constants()
    offenders = {}
    for path in _package_sources():
        if path.parent == PACKAGE / "config":
            continue
        reads = _env_reads(ast.parse(path.read_text(encoding="utf-8")), constants)
        if reads:
            offenders[str(path.relative_to(PACKAGE))] = reads
    assert offenders == {}


def test_cli_options_name_their_variable_from_the_table() -> None:
    """`envvar=` of a click option or argument comes from the table (`options.envvar`),
    never a literal: a renamed variable (or a new alias) then reaches every command."""
    literal = {}
    for path in sorted((PACKAGE / "cli").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.keyword)
                and node.arg == "envvar"
                and isinstance(node.value, ast.Constant)
                and str(node.value.value).startswith("PITH_")
            ):
                literal.setdefault(path.name, []).append(f"line {node.lineno}: {node.value.value}")
    assert literal == {}


def test_the_reader_check_sees_a_read() -> None:
    tree = ast.parse('import os\nA = os.environ.get("PITH_X")\nB = os.environ[K]\nos.getenv(K)\n')
    assert len(_env_reads(tree, {"K": "PITH_Y"})) == 3


def test_the_docs_show_the_table() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert config.markdown_table() in text, "regenerate it: python -m pith_pipeline.config"


def test_every_setting_has_a_meaning_and_a_unique_variable() -> None:
    envs = [e for s in SETTINGS for e in s.envs]
    assert len(envs) == len(set(envs))
    assert all(s.meaning and s.env.startswith("PITH_") for s in SETTINGS)


# -- the readers use it -------------------------------------------------------------
def test_airflow_settings_follow_the_rule() -> None:
    from pith_pipeline import airflow_tasks as at
    from pith_pipeline.runs import chunks

    defaults = at.load_settings(env={})
    env_store = {"PITH_STORE": "/env"}
    for name in config.TASK_SETTINGS:
        assert getattr(defaults, name) == config.parse_value(name, BY_NAME[name].default)
    assert at.Settings is config.Settings and config.Settings().store == config.DEFAULT_STORE
    # an Airflow Variable wins over the environment, a flag over both
    variable = {"PITH_STORE": "/variable"}.get
    assert config.load_settings(env=env_store, variable=variable).store == "/variable"
    assert config.load_settings(env=env_store, variable=variable, store="/flag").store == "/flag"
    env = {"PITH_STORE": "/env", "PITH_BASE_URL": "https://env.example"}
    s = at.load_settings(env=env, store="/flag")
    assert (s.store, s.base_url) == ("/flag", "https://env.example")
    assert int(BY_NAME["snapshot_chunk_bytes"].default or 0) == chunks.MIN_SNAPSHOT_CHUNK_BYTES


def test_airflow_retries_come_from_the_table() -> None:
    from pith_pipeline import airflow_tasks as at

    assert at.default_args(env={})["retries"] == int(BY_NAME["retries"].default or 0)
    assert at.default_args(env={"PITH_RETRIES": "7"})["retries"] == 7


def test_log_signer_reaches_the_run_end_without_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """--log-signer and --no-log are fields of the command's `Settings`, resolved once
    from its options: given to a command that takes `settings`, and to
    `command_settings()`; nothing is written to os.environ."""
    import os

    import click

    from pith_pipeline.cli.options import command_settings, site_options

    seen: list[config.Settings] = []

    @click.command()
    @site_options
    def cmd(base_url: str, registry_name: str, signer_id: str, settings: config.Settings) -> None:
        seen.extend([settings, command_settings()])

    monkeypatch.delenv("PITH_LOG_SIGNER", raising=False)
    monkeypatch.setenv("PITH_BASE_URL", "https://env.example")
    result = CliRunner().invoke(cmd, ["--log-signer", f"file:{SECRET}", "--no-log", "--signer-id", "me"])
    assert result.exit_code == 0, result.output
    assert seen[0] is seen[1]
    assert (seen[0].log_signer, seen[0].keep_log) == (f"file:{SECRET}", False)
    assert (seen[0].base_url, seen[0].signer_id) == ("https://env.example", "me")
    assert "PITH_LOG_SIGNER" not in os.environ


def test_cli_defaults_are_the_table_defaults() -> None:
    from pith_pipeline.parallel import DEFAULT_CHUNK
    from pith_pipeline.publish import BuildConfig

    assert str(DEFAULT_CHUNK) == BY_NAME["worker_chunk"].default
    b = BuildConfig()
    assert (b.base_url, b.registry_name, b.signer_id) == (
        BY_NAME["base_url"].default,
        BY_NAME["registry_name"].default,
        BY_NAME["signer_id"].default,
    )


# -- pith-pipeline config -----------------------------------------------------------
def _run_config(args: list[str], env: dict[str, str]) -> str:
    from pith_pipeline.cli import cli

    result = CliRunner().invoke(cli, ["config", *args], env=env)
    assert result.exit_code == 0, result.output
    return result.output


def test_config_prints_every_setting_and_where_it_came_from() -> None:
    env = {"PITH_BASE_URL": "https://env.example", "PITH_STORE": "/env-store"}
    out = _run_config(["--store", "/flag-store"], env)
    lines = {line.split()[0]: line for line in out.splitlines()}
    assert set(BY_NAME) <= set(lines)
    assert lines["store"].split()[1:] == ["flag", "--store", "/flag-store"]
    assert lines["base_url"].split()[1:] == ["env", "PITH_BASE_URL", "https://env.example"]
    assert lines["retries"].split()[1:] == ["default", "3"]


def test_config_never_prints_a_secret() -> None:
    env = {
        "PITH_SIGNER": f"kms:alias/{SECRET}",
        "PITH_LOG_SIGNER": f"file:/keys/{SECRET}.json",
        "PITH_ENVELOPE_KMS_KEY": f"alias/{SECRET}",
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_SESSION_TOKEN": SECRET,
    }
    text = _run_config([], env)
    doc = json.loads(_run_config(["--json"], env))
    assert SECRET not in text and SECRET not in json.dumps(doc)
    by_name = {s["name"]: s for s in doc["settings"]}
    assert by_name["signer"] == {
        "name": "signer",
        "env": "PITH_SIGNER",
        "value": "kms:****",
        "source": "env",
        "origin": "PITH_SIGNER",
        "secret": True,
    }
    assert doc["aws"]["AWS_SECRET_ACCESS_KEY"] == config.MASK
    assert SECRET not in _run_config(["--signer", f"file:{SECRET}"], {})


# -- every PITH_* value is read strictly (issue 16, item 16's sweep) ----------------------


@pytest.mark.parametrize("value", ["maybe", "2", "of", " "])
def test_local_fsync_is_1_or_0_and_anything_else_is_one_line(value: str) -> None:
    """`PITH_LOCAL_FSYNC=maybe` was silently "on" (anything but "0" was), and "false"
    silently "on" too: a setting that is not understood is an error naming it, where
    the settings are read (the store is given the answer)."""
    env = {"PITH_LOCAL_FSYNC": value}
    if not value.strip():
        assert config.load_settings(env=env).store_options["fsync"]  # empty counts as unset
        return
    with pytest.raises(SettingError) as info:
        config.load_settings(env=env)
    assert str(info.value).startswith(f"PITH_LOCAL_FSYNC={value!r}: expected 1 or 0")


@pytest.mark.parametrize(("value", "on"), [("0", False), ("1", True), ("false", False), ("Yes", True)])
def test_local_fsync_understands_the_usual_words(value: str, on: bool, tmp_path: Path) -> None:
    from pith_pipeline.storage.factory import open_store
    from pith_pipeline.storage.local import LocalStore

    settings = config.load_settings(env={"PITH_LOCAL_FSYNC": value})
    store = open_store(str(tmp_path), **settings.store_options)
    assert isinstance(store, LocalStore) and store.fsync is on


@pytest.mark.parametrize("name", ["PITH_OAI_MIN_INTERVAL", "PITH_LEASE_WAIT"])
@pytest.mark.parametrize("value", ["x", "nan", "inf", "-1"])
def test_task_seconds_are_checked_when_the_settings_are_loaded(name: str, value: str) -> None:
    """The Airflow harvest raised an unnamed ValueError from float('x') deep inside."""
    with pytest.raises(SettingError) as info:
        config.load_settings(env={name: value})
    assert str(info.value).startswith(f"{name}={value!r}: expected")
    field = "oai_min_interval" if name == "PITH_OAI_MIN_INTERVAL" else "lease_wait"
    with pytest.raises(SettingError, match=f"^{name}="):  # made directly, as tests do: checked too
        config.Settings(**{field: value})


def test_task_seconds_read_right() -> None:
    s = config.load_settings(env={"PITH_OAI_MIN_INTERVAL": "0.5", "PITH_LEASE_WAIT": "10"})
    assert (s.oai_min_interval, s.lease_wait_seconds) == (0.5, 10.0)
    assert config.load_settings(env={}).oai_min_interval is None


@pytest.mark.parametrize(
    ("name", "env", "value"),
    [
        ("retries", "PITH_RETRIES", "-1"),
        ("retry_delay_seconds", "PITH_RETRY_DELAY_SECONDS", "nan"),
        ("retry_delay_seconds", "PITH_RETRY_DELAY_SECONDS", "1e300"),
        ("retry_delay_seconds", "PITH_RETRY_DELAY_SECONDS", "-5"),
        ("snapshot_chunk_bytes", "PITH_SNAPSHOT_CHUNK_BYTES", "0"),
    ],
)
def test_numbers_out_of_range_are_one_line(name: str, env: str, value: str) -> None:
    """nan became `timedelta(seconds=nan)`, an unnamed ValueError; 1e300 overflowed."""
    read = config.integer if name in ("retries", "snapshot_chunk_bytes") else config.number
    with pytest.raises(SettingError) as info:
        read(name, {env: value})
    assert str(info.value).startswith(f"{env}={value!r}: expected")


def test_traceback_is_1_or_0(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from pith_pipeline.cli import main

    monkeypatch.setenv("PITH_TRACEBACK", "maybe")
    with pytest.raises(SystemExit) as info:
        main(["config"])
    assert info.value.code == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: PITH_TRACEBACK='maybe': expected 1 or 0") and "\n" not in err


@pytest.mark.parametrize(
    ("env", "value"),
    [
        ("PITH_WORKERS", "x"),
        ("PITH_IO_CONCURRENCY", "-1"),
        ("PITH_LEASE_WAIT", "nan"),
        ("PITH_LEASE_WAIT", "inf"),
    ],
)
def test_a_command_option_from_the_environment_names_the_variable(
    env: str, value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """click said "Invalid value for '--workers'" when nobody had given --workers: the
    operator had set PITH_WORKERS, which the message must name."""
    from pith_pipeline.cli import main

    monkeypatch.setenv(env, value)
    (tmp_path / "in.jsonl").write_text("")
    with pytest.raises(SystemExit) as info:
        main(["build", "--input", str(tmp_path / "in.jsonl"), "--store", str(tmp_path / "s"), "--key", "k"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"{env}={value!r}" in err, err


def test_a_publishing_command_reads_every_setting_before_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A command resolves its `Settings` once, at its start: a bad value of a variable no
    option names stops it there in one line, before the store is touched."""
    from pith_pipeline.cli import main

    monkeypatch.setenv("PITH_CERT_HOURS", "-1")
    (tmp_path / "in.jsonl").write_text("")
    with pytest.raises(SystemExit) as info:
        main(["build", "--input", str(tmp_path / "in.jsonl"), "--store", str(tmp_path / "s"), "--key", "k"])
    assert info.value.code == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: PITH_CERT_HOURS='-1': expected") and "\n" not in err
    assert not (tmp_path / "s").exists()
