"""`pith-pipeline config`: every setting as a command would resolve it, secrets masked.

Why a command: a setting can come from four places (flag, Airflow Variable,
environment, default; see docs/pages/configuration.md), and "which store, which key, which
endpoint will this run use?" should be answerable without reading the code or
printing a secret.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click

from pith_pipeline import config
from pith_pipeline.config import SETTINGS, Variable


def register(group: click.Group) -> None:
    group.add_command(config_command)


def _setting_flags(fn: Callable[..., Any]) -> Callable[..., Any]:
    """One hidden option per setting (`--store`, `--signer`, ...), with no environment
    variable of its own, so a value given here shows as source `flag`."""
    for s in reversed(SETTINGS):
        fn = click.option(s.flag, s.name, default=None, hidden=True, metavar="VALUE")(fn)
    return fn


def _airflow_lookup() -> Variable:
    """Airflow Variables, read the way DAG tasks read them; one clear line if they cannot be."""
    try:
        # lazy: the airflow extra is optional; its absence is the one-line error below
        from pith_pipeline.airflow_tasks import airflow_variable
    except ImportError as exc:  # pragma: no cover - the airflow extra is installed in CI
        raise click.ClickException(f"cannot read Airflow Variables: {exc}") from None

    def lookup(name: str) -> str | None:
        try:
            return airflow_variable(name)
        except Exception as exc:
            raise click.ClickException(
                f"cannot read Airflow Variable {name} from here ({type(exc).__name__}); "
                "run this where Airflow tasks run"
            ) from None

    return lookup


@click.command("config")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option(
    "--airflow-variables",
    is_flag=True,
    help="Also read Airflow Variables (as DAG tasks do; needs access to Airflow).",
)
@_setting_flags
def config_command(as_json: bool, airflow_variables: bool, **flags: str | None) -> None:
    """Print every setting: its value, and where it came from (flag, variable, env or default).

    Secrets are masked: a signer spec shows only its back end (kms:****), so the output
    can be pasted into an issue. Any setting's flag may be given (--store s3://b/p) to
    see what a command given it would use. Set AWS_* variables (boto3 reads them) are
    listed after the settings, masked except region, profile, endpoint and retries.
    """
    variable = _airflow_lookup() if airflow_variables else None
    resolved = config.resolve_all(flags, variable=variable)
    aws = config.aws_environment()
    if as_json:
        doc = {
            "settings": [
                {
                    "name": r.setting.name,
                    "env": r.setting.env,
                    "value": r.shown if r.value else None,
                    "source": r.source,
                    "origin": r.origin or None,
                    "secret": r.setting.secret,
                }
                for r in resolved
            ],
            "aws": dict(aws),
        }
        click.echo(json.dumps(doc, indent=2))
        return
    rows = [(r.setting.name, _shown(r), r.source + (f" {r.origin}" if r.origin else "")) for r in resolved]
    rows += [(name, shown, "env, read by boto3") for name, shown in aws]
    w0 = max(len(r[0]) for r in rows)
    w2 = max(len(r[2]) for r in rows)
    for name, shown, where in rows:
        click.echo(f"{name:<{w0}}  {where:<{w2}}  {shown}")


def _shown(r: config.Resolved) -> str:
    """The masked value; for an unset one, what the code does then."""
    if r.value or not r.setting.default_text:
        return r.shown
    return f"(unset: {r.setting.default_text})"
