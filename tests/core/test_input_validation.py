"""Hostile values are refused when a record is built, each with its field and reason.

Why at construction: a value the canonical form or the index cannot hold (a 2^53+1
version, an int32 overflow, a look-alike id, a year-0001 date) must become one
quarantined record, never a failure later in signing or indexing.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pith_pipeline.core.arxiv_record import ArxivRecord, is_arxiv_id
from pith_pipeline.core.limits import DEFAULT_LIMITS
from pith_pipeline.core.pith_record import PithNumber
from pith_pipeline.core.timeutil import is_iso_seconds, parse_rfc2822
from pith_pipeline.errors import InputError

GOOD_DATE = "Sat, 31 Mar 2007 02:26:18 GMT"


def base(**change: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "id": "0704.0002",
        "title": "A title",
        "abstract": "An abstract.",
        "categories": "math.CO cs.CG",
        "authors": "A. Author and B. Author",
        "versions": [{"version": "v1", "created": GOOD_DATE}],
    }
    obj.update(change)
    return obj


def refused(obj: dict[str, Any]) -> InputError:
    with pytest.raises(InputError) as err:
        ArxivRecord.from_json(obj, where="in.jsonl:1")
    return err.value


@pytest.mark.parametrize(
    "label",
    [
        "v9007199254740993",  # beyond 2^53: the canonical form refuses it
        "v3000000000",  # overflows the int32 index column
        "v10000",
        "v0",
        "v01",
        "v\u0661",  # ARABIC-INDIC DIGIT ONE: `\d` matches it and int() reads it
        "v\uff11",  # FULLWIDTH DIGIT ONE
        "v1\n",
        "V1",
    ],
)
def test_version_labels_are_v1_to_v9999_in_ascii(label: str) -> None:
    err = refused(base(versions=[{"version": label, "created": GOOD_DATE}]))
    assert err.field == "versions"
    assert repr(label) in err.message or label in err.message


def test_highest_allowed_version_builds() -> None:
    rec = ArxivRecord.from_json(base(versions=[{"version": "v9999", "created": GOOD_DATE}]))
    assert rec.version == DEFAULT_LIMITS.max_version == 9999


@pytest.mark.parametrize(
    "ident",
    [
        "2101.00021\n",
        "\uff12\uff11\uff10\uff11.00021",  # full-width digits
        "2101.0002\u0661",
        "hep-th/990100\u0661",
        "hep-th/9901001\n",
        " 2101.00021",
        "2101.00021v2",
        "2113.00021",  # no thirteenth month
        "2100.00021",
        "0612.0001",  # new-style ids began in April 2007 (0704)
        "hep-th/9913001",
        "hep-th/9900001",
        "hep-th/8901001",  # old-style ids ran from 1991 to March 2007
        # the number after the dot has four digits up to December 2014 and five from
        # January 2015: any other width names no paper, but would be a second name
        "1412.00001",
        "0704.00001",
        "1501.0001",
        "2101.0021",
        "9912.0001",
        "0704.0000",  # numbering starts at 1 within each month
        "2101.00000",
        "hep-th/9901000",
    ],
)
def test_ids_are_full_ascii_matches(ident: str) -> None:
    assert not is_arxiv_id(ident)
    assert refused(base(id=ident)).field == "id"


def test_good_ids_still_match() -> None:
    good = ("2101.00021", "0704.0001", "0812.1234", "hep-th/9901001", "math.CO/0102003", "math/0703001")
    assert all(is_arxiv_id(i) for i in good)
    assert all(is_arxiv_id(i) for i in ("alg-geom/9108001", "2912.99999", "9912.00001"))
    era_edges = ("1412.9999", "1501.00001", "1501.99999", "0704.9999", "hep-th/0703999")
    assert all(is_arxiv_id(i) for i in era_edges)


@pytest.mark.parametrize("cat", ["cs.LG\u0661", "c\u0131s"])
def test_categories_are_ascii(cat: str) -> None:
    assert refused(base(categories=cat)).field == "categories"


def test_pith_numbers_and_iso_stamps_are_full_ascii_matches() -> None:
    with pytest.raises(ValueError):
        PithNumber.parse("pith:2019:" + "A" * 26 + "\n")
    with pytest.raises(ValueError):
        PithNumber.parse("pith:\uff12019:" + "A" * 26)
    assert not is_iso_seconds("2019-09-24T19:40:59Z\n")
    assert not is_iso_seconds("2019-09-24T19:40:5\u0669Z")


@pytest.mark.parametrize(
    "text",
    [
        "Mon, 1 Jan 01 00:00:00 GMT",  # two-digit year
        "Sat, 31 Mar 07 02:26:18 GMT",
        "Sat, 31 Mar 2007 02:26:18 GMT\n",
        "Sat, \uff13\uff11 Mar 2007 02:26:18 GMT",
        "Sat, 31 Mar 2007 25:26:18 GMT",
        "31 Mar 07",
        "Wed, 31 Mar 2007 02:26:18 GMT",  # 31 Mar 2007 was a Saturday: which one is meant?
        "Sat, 31 Mar 2007 02:26:18 +0060",  # sixty minutes of offset
        "Sat, 31 Mar 2007 02:26:18 +2500",  # no zone is 25 hours off
        "Sat, 31 Mar 2007 02:26:18 -9999",
    ],
)
def test_dates_are_parsed_strictly(text: str) -> None:
    with pytest.raises(ValueError):
        parse_rfc2822(text)
    err = refused(base(versions=[{"version": "v1", "created": text}]))
    assert err.field == "versions[v1].created"


@pytest.mark.parametrize(
    ("text", "iso"),
    [
        (GOOD_DATE, "2007-03-31T02:26:18+00:00"),
        ("Mon, 2 Apr 2007 19:18:42 GMT", "2007-04-02T19:18:42+00:00"),
        ("2 Apr 2007 19:18:42 GMT", "2007-04-02T19:18:42+00:00"),
        ("Mon, 2 Apr 2007 19:18:42 -0100", "2007-04-02T20:18:42+00:00"),
        ("Mon, 2 Apr 2007 19:18 GMT", "2007-04-02T19:18:00+00:00"),
        ("Fri, 1 Jan 1993", "1993-01-01T00:00:00+00:00"),
    ],
)
def test_real_date_forms_still_parse(text: str, iso: str) -> None:
    assert parse_rfc2822(text).isoformat() == iso


@pytest.mark.parametrize("text", ["Mon, 1 Jan 0001 00:00:00 GMT", "1 Jan 0001"])
def test_year_0001_is_year_1_not_2001(text: str) -> None:
    assert parse_rfc2822(text).year == 1
    err = refused(base(versions=[{"version": "v1", "created": text}]))
    assert err.field == "versions[v1].created" and "before arXiv" in err.message


@pytest.mark.parametrize("text", ["Mon, 31 Dec 1990 23:59:59 GMT", "Thu, 1 Jan 1970 00:00:00 GMT"])
def test_dates_before_arxiv_are_refused(text: str) -> None:
    err = refused(base(versions=[{"version": "v1", "created": text}]))
    assert err.field == "versions[v1].created" and "1991" in err.message


@pytest.mark.parametrize("value", ["0001-01-01", "2024-1-1", "2024-01-01\n", "1980-01-01", "\uff12024-01-01"])
def test_update_date_is_a_strict_iso_day(value: str) -> None:
    assert refused(base(update_date=value)).field == "update_date"


def test_dates_after_tomorrow_are_refused_relative_to_the_run() -> None:
    rec = ArxivRecord.from_json(base(versions=[{"version": "v1", "created": "Wed, 3 Jun 2026 10:00:00 GMT"}]))
    rec.check_dates(today=date(2026, 6, 2))  # tomorrow is allowed (time zones)
    with pytest.raises(InputError) as err:
        rec.check_dates(today=date(2026, 6, 1))
    assert err.value.field == "versions[v1].created" and "2026-06-01" in err.value.message
    late = ArxivRecord.from_json(base(update_date="2026-06-04"))
    with pytest.raises(InputError) as err:
        late.check_dates(today=date(2026, 6, 2))
    assert err.value.field == "update_date"


def test_ids_of_months_after_the_run_are_refused_relative_to_the_run() -> None:
    """`9912.00001` has the form of an id (December 2099), but no paper has it yet: like a
    date after tomorrow, it is quarantined by the run's own day, never signed."""
    far = ArxivRecord.from_json(base(id="9912.00001"))
    with pytest.raises(InputError) as err:
        far.check_dates(today=date(2026, 12, 3))
    assert err.value.field == "id" and "9912.00001" in err.value.message
    with pytest.raises(InputError):
        ArxivRecord.from_json(base(id="2701.00001")).check_dates(today=date(2026, 12, 3))
    ArxivRecord.from_json(base(id="2612.00001")).check_dates(today=date(2026, 12, 3))
    # tomorrow is allowed (time zones), so on the last day of a month the next one is too
    ArxivRecord.from_json(base(id="2701.00001")).check_dates(today=date(2026, 12, 31))
    ArxivRecord.from_json(base(id="hep-th/9901001")).check_dates(today=date(2026, 12, 3))


@pytest.mark.parametrize(
    ("key", "limit_key"),
    [("title", "title"), ("abstract", "abstract"), ("comments", "comments"), ("journal-ref", "journal-ref")],
)
def test_each_text_field_has_a_size_limit(key: str, limit_key: str) -> None:
    limit = DEFAULT_LIMITS.field_limit(limit_key)
    ArxivRecord.from_json(base(**{key: "x" * limit}))  # at the limit: fine
    err = refused(base(**{key: "x" * (limit + 1)}))
    assert err.field == key and str(limit) in err.message


def test_limit_counts_utf8_bytes() -> None:
    limit = DEFAULT_LIMITS.field_limit("title")
    err = refused(base(title="\u00e9" * (limit // 2 + 1)))
    assert err.field == "title"


def test_whole_record_has_a_size_limit() -> None:
    parsed = [["x" * 1000, "y"] for _ in range(DEFAULT_LIMITS.record_bytes // 1000 + 1)]
    err = refused(base(authors_parsed=parsed))
    assert err.field == "record" and str(DEFAULT_LIMITS.record_bytes) in err.message


def test_unencodable_text_is_refused() -> None:
    err = refused(base(title="Quantum \ud800 gravity"))
    assert err.field == "title" and "UTF-8" in err.message


def test_submitted_year_has_four_digits_for_pith_numbers() -> None:
    rec = ArxivRecord.from_json(base())
    assert rec.submitted_at == datetime(2007, 3, 31, 2, 26, 18, tzinfo=UTC)


def test_a_version_date_has_its_documented_size_limit() -> None:
    """`created` is limited to 64 bytes (docs/pages/input-limits.md): blanks around a
    date must not carry it past the limit into the signed record."""
    limit = DEFAULT_LIMITS.field_limit("created")
    padded = GOOD_DATE + " " * (limit - len(GOOD_DATE) + 1)
    err = refused(base(versions=[{"version": "v1", "created": padded}]))
    assert err.field == "versions[v1].created" and str(limit) in err.message


@pytest.mark.parametrize(
    "obj",
    [
        base(id="2101." + "1" * 1_000_000),
        base(versions=[{"version": "v" + "1" * 1_000_000, "created": GOOD_DATE}]),
        base(versions=[{"version": "v1", "created": "x" * 1_000_000}]),
        base(categories="cs.LG " + "x!" * 500),
        base(update_date="2" * 1_000_000),
    ],
    ids=["id", "version", "date", "category", "update_date"],
)
def test_a_reason_never_repeats_a_huge_value(obj: dict[str, Any]) -> None:
    """A reject's reason names the value, shortened: the value itself is in the raw
    input the quarantine keeps, and a reason of megabytes would be printed and logged."""
    err = refused(obj)
    assert len(err.message) < 300, err.message[:300]


def _era_oracle(ident: str) -> bool:
    """arXiv's new-style scheme, said plainly: YYMM from 0704, four digits after the
    dot up to 1412 and five from 1501, numbered from 1."""
    head, _, seq = ident.partition(".")
    if len(head) != 4 or not head.isascii() or not head.isdigit() or not seq.isascii() or not seq.isdigit():
        return False
    yymm, month = int(head), int(head[2:])
    if not 1 <= month <= 12 or yymm < 704 or int(seq) == 0:
        return False
    return len(seq) == (4 if yymm <= 1412 else 5)


@given(
    yymm=st.integers(0, 9999).map(lambda n: f"{n:04d}"),
    seq=st.integers(0, 999_999).flatmap(lambda n: st.sampled_from([f"{n:04d}", f"{n:05d}", str(n)])),
)
@settings(max_examples=2000)
def test_new_style_ids_follow_the_digit_count_of_their_era(yymm: str, seq: str) -> None:
    ident = f"{yymm}.{seq}"
    assert is_arxiv_id(ident) == _era_oracle(ident)


@pytest.mark.parametrize("ident", ["0704.0001", "1412.9999", "1501.00001", "2101.00021"])
def test_era_valid_ids_build(ident: str) -> None:
    assert ArxivRecord.from_json(base(id=ident)).id == ident
