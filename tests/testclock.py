"""A clock for builds in tests: each reading is one second after the last."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


class StepClock:
    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime(2026, 7, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now
