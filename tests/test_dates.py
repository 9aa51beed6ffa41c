"""Time as structure (issue 13): timestamp parsing, relative-date resolution, date forms and query windows."""

from __future__ import annotations

from datetime import date, datetime

import pytest

from cuemem.index.dates import DateSpan, date_forms, format_day, parse_timestamp, query_window, resolve_relative

REF = datetime(2023, 5, 8, 14, 0)  # a Monday
EPOCH = 1683554520  # 2023-05-08 14:02:00 UTC


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2023-05-08", datetime(2023, 5, 8)),
        ("2023-05-08T14:02", datetime(2023, 5, 8, 14, 2)),
        ("2023-05-08 14:02:33", datetime(2023, 5, 8, 14, 2, 33)),
        ("2023-05-08T14:02:33Z", datetime(2023, 5, 8, 14, 2, 33)),
        ("2023-05-08T14:02:33+02:00", datetime(2023, 5, 8, 12, 2, 33)),
        ("2023-05-08T23:30:00-05:00", datetime(2023, 5, 9, 4, 30)),
        ("2023-05-08T14:02:33.250", datetime(2023, 5, 8, 14, 2, 33, 250000)),
        ("2023-05-08 14:02 UTC", datetime(2023, 5, 8, 14, 2)),
        ("1:56 pm on 8 May, 2023", datetime(2023, 5, 8, 13, 56)),
        ("10:37 am on 27 June, 2023", datetime(2023, 6, 27, 10, 37)),
        ("12:09 am on 13 September, 2023", datetime(2023, 9, 13, 0, 9)),
        ("7:55 pm on 9 June 2023", datetime(2023, 6, 9, 19, 55)),
        ("1:14 PM on 25 Sept, 2023", datetime(2023, 9, 25, 13, 14)),
        ("01.01.2024, 18:13:08", datetime(2024, 1, 1, 18, 13, 8)),
        ("01.01.2024 18:13", datetime(2024, 1, 1, 18, 13)),
        ("1.2.2024", datetime(2024, 2, 1)),
        ("2023/05/08 (Mon) 14:02", datetime(2023, 5, 8, 14, 2)),
        ("2023/05/08", datetime(2023, 5, 8)),
        (EPOCH, datetime(2023, 5, 8, 14, 2)),
        (EPOCH * 1000 + 500, datetime(2023, 5, 8, 14, 2, 0, 500000)),
        (EPOCH + 0.25, datetime(2023, 5, 8, 14, 2, 0, 250000)),
        (str(EPOCH), datetime(2023, 5, 8, 14, 2)),
        (str(EPOCH * 1000), datetime(2023, 5, 8, 14, 2)),
        ("May 8, 2023", datetime(2023, 5, 8)),
        ("8 May 2023", datetime(2023, 5, 8)),
        ("May 8th, 2023 at 3pm", datetime(2023, 5, 8, 15)),
        ("Monday, 8 May 2023", datetime(2023, 5, 8)),
        ("8th of May 2023", datetime(2023, 5, 8)),
        ("May 2023", datetime(2023, 5, 1)),
        ("sept 3, 2023", datetime(2023, 9, 3)),
        ("12/25/2023", datetime(2023, 12, 25)),
        ("25/12/2023", datetime(2023, 12, 25)),
        ("03/04/2023", datetime(2023, 3, 4)),
        ("8 May 2023, 2:30 PM", datetime(2023, 5, 8, 14, 30)),
        ("8 MAY 2023 noon", datetime(2023, 5, 8, 12)),
        ("  Tue 9 May 2023 at 12:00 a.m.  ", datetime(2023, 5, 9, 0, 0)),
    ],
)
def test_parse_timestamp(text: str | int | float, expected: datetime) -> None:
    assert parse_timestamp(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        None,
        "",
        "   ",
        "not a date",
        "2023",
        "14:02",
        "May",
        "99/99/9999",
        "2023-02-30",
        "32 May 2023",
        "13:00 pm on 8 May 2023",
        "the 8 May 2023 meeting was fun",
        "8 May 2023 " + "x" * 10_000,
        "1" * 10_000,
        b"2023-05-08",
        True,
        float("nan"),
        10**400,
        "123456789012345678",
    ],
)
def test_parse_timestamp_rejects(text: object) -> None:
    assert parse_timestamp(text) is None  # type: ignore[arg-type]


def span(start: date, end: date | None = None, granularity: str = "day") -> tuple[date, date, str]:
    return start, end or start, granularity


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("today", span(date(2023, 5, 8))),
        ("tonight", span(date(2023, 5, 8))),
        ("this morning", span(date(2023, 5, 8))),
        ("yesterday", span(date(2023, 5, 7))),
        ("last night", span(date(2023, 5, 7))),
        ("the day before yesterday", span(date(2023, 5, 6))),
        ("tomorrow", span(date(2023, 5, 9))),
        ("last Friday", span(date(2023, 5, 5))),
        ("last Monday", span(date(2023, 5, 1))),
        ("next Friday", span(date(2023, 5, 12))),
        ("next Monday", span(date(2023, 5, 15))),
        ("this weekend", span(date(2023, 5, 13), date(2023, 5, 14), "range")),
        ("last weekend", span(date(2023, 5, 6), date(2023, 5, 7), "range")),
        ("last week", span(date(2023, 5, 1), date(2023, 5, 7), "week")),
        ("this week", span(date(2023, 5, 8), date(2023, 5, 14), "week")),
        ("next week", span(date(2023, 5, 15), date(2023, 5, 21), "week")),
        ("two weeks ago", span(date(2023, 4, 24), date(2023, 4, 30), "week")),
        ("2 weeks ago", span(date(2023, 4, 24), date(2023, 4, 30), "week")),
        ("a few days ago", span(date(2023, 5, 4), date(2023, 5, 6), "range")),
        ("3 days ago", span(date(2023, 5, 5))),
        ("a couple of days ago", span(date(2023, 5, 6))),
        ("a month ago", span(date(2023, 4, 1), date(2023, 4, 30), "month")),
        ("last month", span(date(2023, 4, 1), date(2023, 4, 30), "month")),
        ("this month", span(date(2023, 5, 1), date(2023, 5, 31), "month")),
        ("next month", span(date(2023, 6, 1), date(2023, 6, 30), "month")),
        ("last year", span(date(2022, 1, 1), date(2022, 12, 31), "year")),
        ("this year", span(date(2023, 1, 1), date(2023, 12, 31), "year")),
        ("two years ago", span(date(2021, 1, 1), date(2021, 12, 31), "year")),
        ("in a week", span(date(2023, 5, 15), date(2023, 5, 21), "week")),
        ("in two days", span(date(2023, 5, 10))),
        ("last summer", span(date(2022, 6, 1), date(2022, 8, 31), "range")),
        ("last December", span(date(2022, 12, 1), date(2022, 12, 31), "month")),
        ("in June", span(date(2023, 6, 1), date(2023, 6, 30), "month")),
        ("on 8 May", span(date(2023, 5, 8))),
        ("May 3rd", span(date(2023, 5, 3))),
        ("in June 2022", span(date(2022, 6, 1), date(2022, 6, 30), "month")),
        ("back in 2019", span(date(2019, 1, 1), date(2019, 12, 31), "year")),
        ("31 December 2023", span(date(2023, 12, 31))),
        ("the 2023-04-30 release", span(date(2023, 4, 30))),
    ],
)
def test_resolve_relative(text: str, expected: tuple[date, date, str]) -> None:
    spans = resolve_relative(f"I said it {text}, really.", REF)
    assert [(s.start, s.end, s.granularity) for s in spans] == [expected]


def test_resolve_relative_order_duplicates_and_date_reference() -> None:
    spans = resolve_relative("Last week, well yesterday or last night, and then on 1 June 2023.", date(2023, 5, 8))
    assert [s.phrase for s in spans] == ["Last week", "yesterday", "1 June 2023"]
    assert [s.label() for s in spans] == ["week of 1 May 2023", "7 May 2023", "1 June 2023"]


@pytest.mark.parametrize(
    "text",
    [
        "I have been there recently.",
        "See you on Friday.",  # a bare weekday is ambiguous (past or future), so it is left unresolved
        "We met at 14:02 with 2019 people.",
        "You may 2 times try, and those 8 may come.",  # lower-case "may" without a year is the verb
        "In 99999 years, during 1850.",
        "I have painted for 3 years.",
        "When did it happen?",
        "",
    ],
)
def test_resolve_relative_ignores(text: str) -> None:
    assert resolve_relative(text, REF) == []


def test_date_forms_and_format_day() -> None:
    assert date_forms(date(2023, 5, 8)) == ["8 May 2023", "May 2023", "2023"]
    assert date_forms(datetime(2024, 1, 1, 23, 59)) == ["1 January 2024", "January 2024", "2024"]
    assert format_day(datetime(2023, 12, 31, 8)) == "31 December 2023"


def test_date_span_contains_and_labels() -> None:
    week = DateSpan(date(2023, 5, 1), date(2023, 5, 7), "week", "last week")
    assert week.contains(date(2023, 5, 7)) and week.contains(datetime(2023, 5, 1, 23))
    assert not week.contains(date(2023, 5, 8))
    assert week.label() == "week of 1 May 2023"
    assert DateSpan(date(2023, 5, 1), date(2023, 5, 31), "month", "").label() == "May 2023"
    assert DateSpan(date(2023, 1, 1), date(2023, 12, 31), "year", "").label() == "2023"
    assert DateSpan(date(2023, 5, 6), date(2023, 5, 7), "range", "").label() == "6 May 2023 to 7 May 2023"


@pytest.mark.parametrize(
    ("query", "now", "expected"),
    [
        ("What did I do in May 2023?", None, span(date(2023, 5, 1), date(2023, 5, 31), "month")),
        ("What happened on 31 December 2023?", None, span(date(2023, 12, 31))),
        ("Where did I travel in 2022?", None, span(date(2022, 1, 1), date(2022, 12, 31), "year")),
        ("What did Melanie do during the summer of 2022?", None, span(date(2022, 6, 1), date(2022, 8, 31), "range")),
        ("What did I buy at the start of 2023?", None, span(date(2023, 1, 1), date(2023, 3, 31), "range")),
        ("Did I go out on 2023-05-08?", None, span(date(2023, 5, 8))),
        ("In May 2023, and above all on 8 May 2023, what did I do?", None, span(date(2023, 5, 8))),
        ("What happened on 8 May?", REF, span(date(2023, 5, 8))),
        ("What did I eat yesterday?", REF, span(date(2023, 5, 7))),
        ("What did I do last week?", date(2023, 5, 8), span(date(2023, 5, 1), date(2023, 5, 7), "week")),
        ("What happened two months ago?", REF, span(date(2023, 3, 1), date(2023, 3, 31), "month")),
    ],
)
def test_query_window(query: str, now: datetime | date | None, expected: tuple[date, date, str]) -> None:
    window = query_window(query, now)
    assert window is not None
    assert (window.start, window.end, window.granularity) == expected


@pytest.mark.parametrize(
    ("query", "now"),
    [
        ("When did Caroline go to the LGBTQ support group?", None),
        ("When did Caroline go to the LGBTQ support group?", REF),
        ("How many years has Melanie been married?", REF),
        ("She has been painting for 3 years; how long ago did she start?", REF),
        ("What did I do last week?", None),
        ("What happened on 8 May?", None),
        ("How many of the 2019 people came?", None),
        ("", REF),
    ],
)
def test_query_window_none(query: str, now: datetime | date | None) -> None:
    assert query_window(query, now) is None
