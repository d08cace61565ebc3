"""Commands for this capability (registered into the main group)."""

from __future__ import annotations

import click


def register(group: click.Group) -> None:
    """Add this module's commands to the `pith-pipeline` group."""
