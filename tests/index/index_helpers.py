"""Helpers shared by the index tests (imported by conftest and test modules)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from pith_pipeline.publish import RunSummary
from pith_pipeline.storage.base import Store

FIXED = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)

Runner = Callable[..., tuple[RunSummary, str]]


def fixed_clock() -> datetime:
    return FIXED


def snapshot(store: Store) -> dict[str, bytes]:
    """Every object in the store and its bytes."""
    return {k: store.get(k) or b"" for k in store.list("")}


def record_with_versions(line: str, keep: int) -> str:
    """The same paper as arXiv described it when it had only its first `keep` versions."""
    obj: dict[str, Any] = json.loads(line)
    obj["versions"] = obj["versions"][:keep]
    return json.dumps(obj)
