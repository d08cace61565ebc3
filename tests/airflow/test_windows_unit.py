"""Which day a `pith_ingest` run owns (pure: no Airflow needed, but for the test of its own enums)."""

from __future__ import annotations

from datetime import UTC, date, datetime
from enum import Enum
from typing import Any

import pytest

from pith_pipeline.airflow_tasks import mapped_results
from pith_pipeline.errors import InputError
from pith_pipeline.runs.windows import ARXIV_FIRST_DAY, run_kind, window_for_run

TODAY = date(2026, 12, 3)
MIDNIGHT = datetime(2026, 12, 2, tzinfo=UTC)
NEXT = datetime(2026, 12, 3, tzinfo=UTC)


def test_scheduled_runs_own_their_data_interval() -> None:
    w = window_for_run(MIDNIGHT, NEXT, run_type="scheduled", today=TODAY)
    assert w.id == "2026-12-02"


def test_a_manual_run_owns_its_logical_date_not_the_trigger_time() -> None:
    w = window_for_run(
        MIDNIGHT, NEXT, logical_date=datetime(2019, 9, 26, tzinfo=UTC), run_type="manual", today=TODAY
    )
    assert w.id == "2019-09-26"


class _SdkRunType(str, Enum):  # noqa: UP042 (a StrEnum prints its value: not the SDK's form)
    """Like the Task SDK's `DagRunType`: a str enum whose `str()` is `DagRunType.MANUAL`."""

    MANUAL = "manual"
    SCHEDULED = "scheduled"
    BACKFILL = "backfill"


class _CoreRunType(str, Enum):  # noqa: UP042 (as airflow-core declares it)
    """Like airflow-core's `DagRunType`: `str()` is the value, the backfill member is named apart."""

    MANUAL = "manual"
    BACKFILL_JOB = "backfill"

    def __str__(self) -> str:
        return self.value


@pytest.mark.parametrize(
    "run_type",
    [_SdkRunType.MANUAL, _CoreRunType.MANUAL, "manual", "MANUAL", "DagRunType.MANUAL", " Manual "],
)
def test_a_manual_run_is_recognised_in_every_form_airflow_gives_its_type(run_type: object) -> None:
    """Issue 25: the Task SDK gives `run_type` as an enum whose `str()` is
    `DagRunType.MANUAL`; compared as `str(...) == "manual"`, a trigger with
    `--logical-date 2019-11-01` harvested yesterday and reported success."""
    w = window_for_run(
        MIDNIGHT, NEXT, logical_date=datetime(2019, 11, 1, tzinfo=UTC), run_type=run_type, today=TODAY
    )
    assert w.id == "2019-11-01"


@pytest.mark.parametrize(
    "run_type", [_SdkRunType.SCHEDULED, _SdkRunType.BACKFILL, _CoreRunType.BACKFILL_JOB, "backfill", None]
)
def test_other_runs_own_their_data_interval_whatever_the_form_of_their_type(run_type: object) -> None:
    w = window_for_run(
        MIDNIGHT, NEXT, logical_date=datetime(2019, 11, 1, tzinfo=UTC), run_type=run_type, today=TODAY
    )
    assert w.id == "2026-12-02"


def test_airflows_own_run_type_enums_are_read(airflow_home: Any) -> None:
    """The enums themselves, from the Task SDK (what a task's context holds) and from
    airflow-core (what the scheduler and the CLI use)."""
    from airflow.sdk.api.datamodels._generated import DagRunType as SdkRunType
    from airflow.utils.types import DagRunType as CoreRunType

    assert str(SdkRunType.MANUAL) != "manual"  # the form that hid the defect
    assert run_kind(SdkRunType.MANUAL) == run_kind(CoreRunType.MANUAL) == "manual"
    assert run_kind(SdkRunType.BACKFILL) == run_kind(CoreRunType.BACKFILL_JOB) == "backfill"
    assert run_kind(SdkRunType.SCHEDULED) == "scheduled"


@pytest.mark.parametrize(
    ("run_type", "kind"),
    [
        (_SdkRunType.BACKFILL, "backfill"),
        (_CoreRunType.BACKFILL_JOB, "backfill"),
        ("DagRunType.BACKFILL_JOB", "backfill"),
        ("DagRunType.SCHEDULED", "scheduled"),
        ("asset_triggered", "asset_triggered"),
        (None, ""),
    ],
)
def test_run_kind_normalises_the_run_type(run_type: object, kind: str) -> None:
    assert run_kind(run_type) == kind


def test_conf_day_wins() -> None:
    w = window_for_run(MIDNIGHT, NEXT, run_type="scheduled", conf={"day": "2007-04-02"}, today=TODAY)
    assert w.id == "2007-04-02"


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ({"day": "1991-08-13"}, "before arXiv's first day"),
        ({"day": "2026-12-04"}, "after today"),
        ({"day": "02/04/2007"}, "YYYY-MM-DD"),
    ],
)
def test_days_arxiv_cannot_have_are_refused_by_name(conf: dict[str, str], message: str) -> None:
    with pytest.raises(InputError, match=message):
        window_for_run(MIDNIGHT, NEXT, conf=conf, today=TODAY)


def test_today_is_refused_until_it_is_over() -> None:
    """A run for today (the UI proposes the trigger time as the logical date) would
    store an incomplete harvest as the day's complete one, which every later run of
    the day replays instead of asking arXiv again: the rest of the day would be lost."""
    for kwargs in (
        {"conf": {"day": TODAY.isoformat()}},
        {"logical_date": datetime(2026, 12, 3, 14, 5, tzinfo=UTC), "run_type": "manual"},
    ):
        with pytest.raises(InputError, match=r"2026-12-03 is not over yet.*from 2026-12-04"):
            window_for_run(MIDNIGHT, NEXT, today=TODAY, **kwargs)  # type: ignore[arg-type]
    assert window_for_run(MIDNIGHT, NEXT, conf={"day": "2026-12-02"}, today=TODAY).id == "2026-12-02"


def test_arxivs_first_day_is_allowed() -> None:
    assert (
        window_for_run(None, None, conf={"day": ARXIV_FIRST_DAY.isoformat()}, today=TODAY).id == "1991-08-14"
    )


def test_mapped_results_are_read_by_index_up_to_their_length() -> None:
    class Lazy:
        """Like Airflow's lazy XCom sequence: reading past the end is an error."""

        def __init__(self, items: list[int]) -> None:
            self.items = items

        def __len__(self) -> int:
            return len(self.items)

        def __getitem__(self, i: int) -> int:
            if i >= len(self.items):
                raise AssertionError(f"read past the end at {i}")
            return self.items[i]

    assert mapped_results(Lazy([1, 2, 3])) == [1, 2, 3]
