"""Options shared by several commands, each with its environment variable."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from pith_pipeline.pipeline import DEFAULT_BASE_URL, BuildConfig

F = TypeVar("F", bound=Callable[..., Any])


def site_options(fn: F) -> F:
    """--base-url, --registry-name, --signer-id."""
    fn = click.option("--signer-id", envvar="PITH_SIGNER_ID", default="pith-pipeline",
                      show_default=True, help="Name of this registry in event signer blocks.")(fn)
    fn = click.option("--registry-name", envvar="PITH_REGISTRY_NAME", default="Pith Pipeline",
                      show_default=True, help="Human name used in mirror hints.")(fn)
    fn = click.option("--base-url", envvar="PITH_BASE_URL", default=DEFAULT_BASE_URL,
                      show_default=True,
                      help="Public URL the store is served at (links, mirror hints, key URL).")(fn)
    return fn


def build_config(base_url: str, registry_name: str, signer_id: str) -> BuildConfig:
    return BuildConfig(base_url=base_url, registry_name=registry_name, signer_id=signer_id)
