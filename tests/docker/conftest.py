"""The live Docker stack test is opt-in: it needs root (or a running Docker), several
minutes and the network to Debian and PyPI. `.ci/run` runs it with PITH_DOCKER_STACK=1;
without that it is deselected (not skipped), so the everyday gate stays fast."""

from __future__ import annotations

import os

import pytest

MARK = "docker_stack"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{MARK}: starts the real compose stack (PITH_DOCKER_STACK=1)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("PITH_DOCKER_STACK") == "1":
        return
    keep = [i for i in items if i.get_closest_marker(MARK) is None]
    dropped = [i for i in items if i.get_closest_marker(MARK) is not None]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
