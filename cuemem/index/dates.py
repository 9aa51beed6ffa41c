"""Time as structure (issue 13): turn timestamps parsed, and the dates a turn or a question refers to resolved.

Timezone-free and deterministic: datetimes are naive (aware input is converted to UTC, then its tzinfo dropped),
the clock is never read, and every relative expression is resolved against a reference date the caller gives.
"""

from __future__ import annotations

import calendar
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

__all__ = ["MONTHS", "DateSpan", "date_forms", "format_day", "parse_timestamp", "query_window", "resolve_relative"]

MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")

_MAX_TIMESTAMP_CHARS = 200
_EPOCH = datetime(1970, 1, 1)
_MONTH_NUM = {name.lower(): i for i, name in enumerate(MONTHS, 1)} | {
    name[:3].lower(): i for i, name in enumerate(MONTHS, 1)
}
_MONTH_NUM["sept"] = 9
_WEEKDAY_NUM = {name: i for i, name in enumerate(WEEKDAYS)} | {name[:3]: i for i, name in enumerate(WEEKDAYS)}
_WEEKDAY_NUM |= {"tues": 1, "thur": 3, "thurs": 3}
_MONTH_ALT = "|".join(sorted(_MONTH_NUM, key=len, reverse=True))  # longest first: "march" before "mar"
_MONTH = rf"\b({_MONTH_ALT})\.?(?![a-z])"
_WEEKDAY = "(" + "|".join(WEEKDAYS) + ")"
_ORD = r"(?:st|nd|rd|th)?"
_SEP = r"(?:,\s*|\s+)"  # between a day or month and the year: "8 May, 2023", "May 8 2023"
_NUMBER_WORDS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
}
_FEW = ("a few", "few", "several")
_NUM = r"(a\s+couple\s+of|a\s+couple|couple\s+of|a\s+few|few|several|an|a|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|\d{1,3})"  # noqa: E501
_UNIT = r"(day|week|month|year)s?"
_SEASONS = {"spring": 3, "summer": 6, "autumn": 9, "fall": 9, "winter": 12}  # meteorological: 3-month seasons
_SEASON = "(spring|summer|autumn|fall|winter)"
_FILLER = {"on", "at", "the", "of", "utc", "gmt"} | set(_WEEKDAY_NUM)  # words a timestamp may carry besides its parts


@dataclass(frozen=True)
class DateSpan:
    """Inclusive days, a granularity ("day", "week", "month", "year" or "range") and the text they came from."""

    start: date
    end: date
    granularity: str
    phrase: str

    def contains(self, d: date) -> bool:
        """Whether the day (or a datetime's day) lies in the span."""
        day = d.date() if isinstance(d, datetime) else d
        return self.start <= day <= self.end

    def label(self) -> str:
        """The canonical human form: "8 May 2023", "week of 8 May 2023", "May 2023", "2023" or "1 June 2022 to ..."."""
        if self.granularity == "day":
            return format_day(self.start)
        if self.granularity == "week":
            return f"week of {format_day(self.start)}"
        if self.granularity == "month":
            return f"{MONTHS[self.start.month - 1]} {self.start.year}"
        if self.granularity == "year":
            return str(self.start.year)
        return f"{format_day(self.start)} to {format_day(self.end)}"


def format_day(d: date | datetime) -> str:
    """A day as questions write it: "8 May 2023" (no leading zero, full month name)."""
    return f"{d.day} {MONTHS[d.month - 1]} {d.year}"


def date_forms(d: date | datetime) -> list[str]:
    """The forms a question may use for a day: day, month and year ("8 May 2023", "May 2023", "2023")."""
    return [format_day(d), f"{MONTHS[d.month - 1]} {d.year}", str(d.year)]


# ---- timestamps -------------------------------------------------------------------------------------------------

_ISO = re.compile(r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?)?(?:Z|[+-]\d{2}(?::?\d{2})?)?")
_EPOCH_TEXT = re.compile(r"-?\d{10}(?:\.\d+)?|-?\d{13}")
_TIME_HM = re.compile(
    r"(?<![\d:.])(\d{1,2}):(\d{2})(?::(\d{2})(?:[.,](\d{1,6})\d*)?)?(?:\s*([ap])\.?m\b\.?)?(?![\d:])", re.I
)
_TIME_H = re.compile(r"(?<![\d:.])(\d{1,2})\s*([ap])\.?m\b\.?", re.I)
_TIME_WORD = re.compile(r"\b(noon|midday|midnight)\b", re.I)


def _month_of(name: str) -> int:
    """The number of a month name or abbreviation ("Sept." -> 9)."""
    return _MONTH_NUM[name.lower().rstrip(".")]


def _month_in_prose(name: str) -> int:
    """A month named in running text without a year; a lower-case "may" is the verb, not the month."""
    if name.rstrip(".") == "may":
        raise ValueError("'may' in lower case is read as the verb")
    return _month_of(name)


def _slash_date(first: int, second: int, year: int) -> date:
    """A slashed date with the year last: month/day as in the US, unless the first part can only be a day."""
    return date(year, second, first) if first > 12 else date(year, first, second)


# Date parts of a timestamp, most specific first; each builds a date from its match (raising ValueError if invalid).
_TS_DATES: list[tuple[re.Pattern[str], Callable[[re.Match[str]], date]]] = [
    (re.compile(r"(?<![\d-])(\d{4})-(\d{1,2})-(\d{1,2})(?!\d)"), lambda m: date(*map(int, m.groups()))),
    (re.compile(r"(?<![\d/])(\d{4})/(\d{1,2})/(\d{1,2})(?![\d/])"), lambda m: date(*map(int, m.groups()))),
    (
        re.compile(r"(?<![\d.])(\d{1,2})\.(\d{1,2})\.(\d{4})(?!\d)"),
        lambda m: date(int(m[3]), int(m[2]), int(m[1])),
    ),
    (
        re.compile(r"(?<![\d/])(\d{1,2})/(\d{1,2})/(\d{4})(?![\d/])"),
        lambda m: _slash_date(int(m[1]), int(m[2]), int(m[3])),
    ),
    (
        re.compile(rf"\b(\d{{1,2}}){_ORD}\s+(?:of\s+)?{_MONTH}{_SEP}(\d{{4}})(?!\d)", re.I),
        lambda m: date(int(m[3]), _month_of(m[2]), int(m[1])),
    ),
    (
        re.compile(rf"{_MONTH}\s+(\d{{1,2}}){_ORD}\b{_SEP}(\d{{4}})(?!\d)", re.I),
        lambda m: date(int(m[3]), _month_of(m[1]), int(m[2])),
    ),
    (re.compile(rf"{_MONTH}{_SEP}(\d{{4}})(?!\d)", re.I), lambda m: date(int(m[2]), _month_of(m[1]), 1)),
]


def _from_epoch(value: float) -> datetime | None:
    """Seconds (or, from 1e11 up, milliseconds) since 1970-01-01 UTC as a naive datetime."""
    try:
        seconds = float(value)
        if not math.isfinite(seconds):
            return None
        if abs(seconds) >= 1e11:
            seconds /= 1000
        return _EPOCH + timedelta(seconds=seconds)
    except (OverflowError, ValueError):
        return None


def _parse_iso(text: str) -> datetime | None:
    """An ISO 8601 date or datetime; an offset is applied to reach UTC, then dropped."""
    try:
        parsed = datetime.fromisoformat(text)
        if parsed.tzinfo is not None:
            parsed = parsed.astimezone(UTC).replace(tzinfo=None)
        return parsed
    except (ValueError, OverflowError):
        return None


def _find_time(text: str) -> tuple[time, re.Match[str]] | None:
    """The first time of day in the text ("14:02", "2:30 PM", "3pm", "noon"), with its match; None if none."""
    for pattern in (_TIME_HM, _TIME_H, _TIME_WORD):
        m = pattern.search(text)
        if m is None:
            continue
        if pattern is _TIME_WORD:
            return time(0 if m[1].lower() == "midnight" else 12), m
        if pattern is _TIME_H:
            hour, minute, second, micro, meridiem = int(m[1]), 0, 0, "", m[2]
        else:
            hour, minute, second, micro, meridiem = int(m[1]), int(m[2]), int(m[3] or 0), m[4] or "", m[5]
        if meridiem:
            if not 1 <= hour <= 12:
                raise ValueError("12-hour clock out of range")
            hour = hour % 12 + (12 if meridiem.lower() == "p" else 0)
        return time(hour, minute, second, int(micro.ljust(6, "0")) if micro else 0), m
    return None


def _parse_loose(text: str) -> datetime | None:
    """A date written in words or with slashes or dots, with an optional time; only filler words may remain."""
    found_date = next(((m, build) for pattern, build in _TS_DATES if (m := pattern.search(text))), None)
    if found_date is None:
        return None
    m, build = found_date
    try:
        day = build(m)
        rest = f"{text[: m.start()]} {text[m.end() :]}"
        found = _find_time(rest)
    except (ValueError, KeyError):
        return None
    clock = time()
    if found is not None:
        clock, tm = found
        rest = f"{rest[: tm.start()]} {rest[tm.end() :]}"
    leftover = re.findall(r"[^\W_]+", rest.lower())
    if any(word not in _FILLER for word in leftover):
        return None
    return datetime.combine(day, clock)


def parse_timestamp(text: str | int | float | None) -> datetime | None:
    """A turn's timestamp as a naive datetime (UTC for aware or epoch input); None for anything it cannot read."""
    if text is None or isinstance(text, bool):
        return None
    if isinstance(text, int | float):
        return _from_epoch(text)
    if not isinstance(text, str):
        return None
    text = text.strip()
    if not text or len(text) > _MAX_TIMESTAMP_CHARS:
        return None
    if _EPOCH_TEXT.fullmatch(text):
        return _from_epoch(float(text))
    if _ISO.fullmatch(text):
        parsed = _parse_iso(text)
        if parsed is not None:
            return parsed
    return _parse_loose(text)


# ---- date expressions in text -----------------------------------------------------------------------------------


def _day(d: date, phrase: str) -> DateSpan:
    """A one-day span."""
    return DateSpan(d, d, "day", phrase)


def _week(d: date, phrase: str) -> DateSpan:
    """The Monday-to-Sunday week holding the day."""
    monday = d - timedelta(days=d.weekday())
    return DateSpan(monday, monday + timedelta(days=6), "week", phrase)


def _month(year: int, month: int, phrase: str) -> DateSpan:
    """A calendar month; month numbers outside 1..12 roll over into neighbouring years."""
    year, month = divmod(year * 12 + month - 1, 12)
    month += 1
    return DateSpan(date(year, month, 1), date(year, month, calendar.monthrange(year, month)[1]), "month", phrase)


def _year(year: int, phrase: str) -> DateSpan:
    """A calendar year."""
    return DateSpan(date(year, 1, 1), date(year, 12, 31), "year", phrase)


def _season(year: int, name: str, phrase: str) -> DateSpan:
    """A meteorological season; winter YEAR runs from December YEAR to the end of February YEAR+1."""
    first = _month(year, _SEASONS[name.lower()], phrase)
    last = _month(year, _SEASONS[name.lower()] + 2, phrase)
    return DateSpan(first.start, last.end, "range", phrase)


def _unit(ref: date, unit: str, n: int, phrase: str) -> DateSpan:
    """The day, week, month or year n units away from the reference day (negative: in the past)."""
    if unit == "day":
        return _day(ref + timedelta(days=n), phrase)
    if unit == "week":
        return _week(ref + timedelta(weeks=n), phrase)
    if unit == "month":
        return _month(ref.year, ref.month + n, phrase)
    return _year(ref.year + n, phrase)


def _count(word: str) -> int | None:
    """A count written as digits or words ("3", "three", "a couple of"); None for "a few"/"several"."""
    word = " ".join(word.lower().split())
    if word in _FEW:
        return None
    if word.startswith(("a couple", "couple")):
        return 2
    return int(word) if word.isdigit() else _NUMBER_WORDS[word]


def _offset(ref: date, count: str, unit: str, sign: int, phrase: str) -> DateSpan:
    """N units before (sign -1) or after (sign +1) the reference; "a few" is the range from 2 to 4 units."""
    n = _count(count)
    if n is not None:
        return _unit(ref, unit.lower(), sign * n, phrase)
    near, far = _unit(ref, unit.lower(), sign * 2, phrase), _unit(ref, unit.lower(), sign * 4, phrase)
    start, end = (far.start, near.end) if sign < 0 else (near.start, far.end)
    return DateSpan(start, end, "range", phrase)


def _direction(word: str) -> int:
    """-1 for last/past, +1 for next/coming, 0 for this."""
    word = " ".join(word.lower().split())
    if word in ("last", "past", "this past"):
        return -1
    if word in ("next", "coming", "this coming"):
        return 1
    return 0


def _weekday(ref: date, which: str, name: str, phrase: str) -> DateSpan:
    """Last (strictly before the reference), next (strictly after) or this (in the reference's week) weekday."""
    target, direction = _WEEKDAY_NUM[name.lower()], _direction(which)
    if direction < 0:
        return _day(ref - timedelta(days=(ref.weekday() - target) % 7 or 7), phrase)
    if direction > 0:
        return _day(ref + timedelta(days=(target - ref.weekday()) % 7 or 7), phrase)
    return _day(ref + timedelta(days=target - ref.weekday()), phrase)


def _weekend(ref: date, which: str, phrase: str) -> DateSpan:
    """The Saturday and Sunday of the reference's week, or of the week before or after."""
    saturday = ref + timedelta(days=5 - ref.weekday() + 7 * _direction(which))
    return DateSpan(saturday, saturday + timedelta(days=1), "range", phrase)


def _relative_season(ref: date, which: str, name: str, phrase: str) -> DateSpan:
    """Last season: latest ended before the reference; next: first not begun; this: the one under way or this year's."""
    direction = _direction(which)
    candidates = [_season(year, name, phrase) for year in range(ref.year - 2, ref.year + 2)]
    if direction < 0:
        return [s for s in candidates if s.end < ref][-1]
    if direction > 0:
        return next(s for s in candidates if s.start > ref)
    current = [s for s in candidates if s.contains(ref)]
    return current[0] if current else _season(ref.year, name, phrase)


def _relative_month(ref: date, which: str, name: str, phrase: str) -> DateSpan:
    """Last or next MONTH: the latest such month before the reference's month, or the first after it."""
    month = _month_in_prose(name)
    if _direction(which) < 0:
        return _month(ref.year - (1 if month >= ref.month else 0), month, phrase)
    return _month(ref.year + (1 if month <= ref.month else 0), month, phrase)


def _in_year(m: re.Match[str]) -> int:
    """A four-digit year as a calendar year, rejecting numbers outside 1900..2100 (counts, not years)."""
    year = int(m["year"])
    if not 1900 <= year <= 2100:
        raise ValueError("not a plausible year")
    return year


def _year_part(year: int, part: str, phrase: str) -> DateSpan:
    """The start (January to March) or end (October to December) of a year."""
    first = 1 if part.lower() in ("start", "beginning", "early") else 10
    return DateSpan(date(year, first, 1), _month(year, first + 2, phrase).end, "range", phrase)


_Handler = Callable[[re.Match[str], date | None], DateSpan | None]


def _needs_ref(build: Callable[[re.Match[str], date], DateSpan]) -> _Handler:
    """A handler that resolves only against a reference day, and yields nothing without one."""
    return lambda m, ref: None if ref is None else build(m, ref)


def _absolute(build: Callable[[re.Match[str]], DateSpan]) -> _Handler:
    """A handler that needs no reference day."""
    return lambda m, ref: build(m)


def _day_month(m: re.Match[str], ref: date | None) -> DateSpan | None:
    """A day and month ("8 May 2023", "May 8th"); without a year, the reference's (and nothing without one)."""
    if m["year"] is None and ref is None:
        return None
    if m["year"]:
        return _day(date(int(m["year"]), _month_of(m["month"]), int(m["day"])), m[0])
    return _day(date(ref.year, _month_in_prose(m["month"]), int(m["day"])), m[0])  # type: ignore[union-attr]


# Every rule is a pattern and a handler; overlapping matches are settled in favour of the earliest, then longest.
_RULES: list[tuple[re.Pattern[str], _Handler]] = [
    (
        re.compile(r"(?<![\d-])(\d{4})-(\d{1,2})-(\d{1,2})(?![\d-])"),
        _absolute(lambda m: _day(date(*map(int, m.groups())), m[0])),
    ),
    (
        re.compile(r"(?<![\d/])(\d{4})/(\d{1,2})/(\d{1,2})(?![\d/])"),
        _absolute(lambda m: _day(date(*map(int, m.groups())), m[0])),
    ),
    (
        re.compile(r"(?<![\d.])(\d{1,2})\.(\d{1,2})\.(\d{4})(?![\d.]\d)"),
        _absolute(lambda m: _day(date(int(m[3]), int(m[2]), int(m[1])), m[0])),
    ),
    (
        re.compile(r"(?<![\d/])(\d{1,2})/(\d{1,2})/(\d{4})(?![\d/])"),
        _absolute(lambda m: _day(_slash_date(int(m[1]), int(m[2]), int(m[3])), m[0])),
    ),
    (
        re.compile(
            rf"\b(?P<day>\d{{1,2}}){_ORD}\s+(?:of\s+)?(?P<month>{_MONTH_ALT})\.?(?![a-z])"
            rf"(?:{_SEP}(?P<year>\d{{4}})(?!\d))?",
            re.I,
        ),
        _day_month,
    ),
    (
        re.compile(
            rf"\b(?P<month>{_MONTH_ALT})\.?\s+(?P<day>\d{{1,2}}){_ORD}\b(?!:\d)"
            rf"(?:{_SEP}(?P<year>\d{{4}})(?!\d))?",
            re.I,
        ),
        _day_month,
    ),
    (
        re.compile(rf"{_MONTH}{_SEP}(?:of\s+)?(\d{{4}})(?!\d)", re.I),
        _absolute(lambda m: _month(int(m[2]), _month_of(m[1]), m[0])),
    ),
    (
        re.compile(rf"\b(?:in|during|since|from|until|early|late)\s+{_MONTH}(?!{_SEP}(?:of\s+)?\d)", re.I),
        _needs_ref(lambda m, ref: _month(ref.year, _month_in_prose(m[1]), m[0])),
    ),
    (
        re.compile(rf"\b(last|next)\s+{_MONTH}(?!{_SEP}(?:of\s+)?\d)", re.I),
        _needs_ref(lambda m, ref: _relative_month(ref, m[1], m[2], m[0])),
    ),
    (
        re.compile(rf"\b(?:the\s+)?{_SEASON}\s+(?:of\s+)?(?P<year>\d{{4}})(?!\d)", re.I),
        _absolute(lambda m: _season(_in_year(m), m[1], m[0])),
    ),
    (
        re.compile(r"\b(?:the\s+)?(start|beginning|early|end|late)(?:\s+of)?[\s-]+(?P<year>\d{4})(?![\d:])", re.I),
        _absolute(lambda m: _year_part(_in_year(m), m[1], m[0])),
    ),
    (
        re.compile(r"\b(?:in|since|from|during)\s+(?:the\s+year\s+)?(?P<year>\d{4})(?!\d|\s*[-/.:]\s*\d)", re.I),
        _absolute(lambda m: _year(_in_year(m), m[0])),
    ),
    (
        re.compile(r"\bthe\s+day\s+before\s+yesterday\b", re.I),
        _needs_ref(lambda m, ref: _day(ref - timedelta(days=2), m[0])),
    ),
    (
        re.compile(r"\bthe\s+day\s+after\s+tomorrow\b", re.I),
        _needs_ref(lambda m, ref: _day(ref + timedelta(days=2), m[0])),
    ),
    (
        re.compile(r"\b(?:today|tonight|this\s+(?:morning|afternoon|evening))\b", re.I),
        _needs_ref(lambda m, ref: _day(ref, m[0])),
    ),
    (
        re.compile(r"\b(?:yesterday|last\s+night)\b", re.I),
        _needs_ref(lambda m, ref: _day(ref - timedelta(days=1), m[0])),
    ),
    (re.compile(r"\btomorrow\b", re.I), _needs_ref(lambda m, ref: _day(ref + timedelta(days=1), m[0]))),
    (
        re.compile(rf"\b(this\s+past|this\s+coming|last|next|this|past|coming)\s+{_WEEKDAY}\b", re.I),
        _needs_ref(lambda m, ref: _weekday(ref, m[1], m[2], m[0])),
    ),
    (
        re.compile(r"\b(this\s+past|this\s+coming|last|next|this|past|coming)\s+weekend\b", re.I),
        _needs_ref(lambda m, ref: _weekend(ref, m[1], m[0])),
    ),
    (
        re.compile(r"\b(last|this|next)\s+(week|month|year)\b", re.I),
        _needs_ref(lambda m, ref: _unit(ref, m[2].lower(), _direction(m[1]), m[0])),
    ),
    (
        re.compile(rf"\b(?:the\s+)?(last|this|next|past|coming)\s+{_SEASON}\b", re.I),
        _needs_ref(lambda m, ref: _relative_season(ref, m[1], m[2], m[0])),
    ),
    (
        re.compile(rf"\b{_NUM}\s+{_UNIT}\s+ago\b", re.I),
        _needs_ref(lambda m, ref: _offset(ref, m[1], m[2], -1, m[0])),
    ),
    (
        re.compile(rf"\bin\s+{_NUM}\s+{_UNIT}\b(?!\s+ago)", re.I),
        _needs_ref(lambda m, ref: _offset(ref, m[1], m[2], 1, m[0])),
    ),
]


def _as_day(value: date | datetime) -> date:
    """The day of a date or datetime."""
    return value.date() if isinstance(value, datetime) else value


def _scan(text: str, ref: date | None) -> list[DateSpan]:
    """Every date expression in the text, in order; of overlapping matches the earliest, then the longest, wins."""
    if not isinstance(text, str):
        return []
    found = []
    for pattern, handler in _RULES:
        for m in pattern.finditer(text):
            try:
                span = handler(m, ref)
            except (ValueError, OverflowError, KeyError, IndexError, StopIteration):
                span = None
            if span is not None:
                found.append((m.start(), -(m.end() - m.start()), m.end(), span))
    found.sort(key=lambda item: item[:2])
    spans, covered = [], 0
    for start, _, end, span in found:
        if start >= covered:
            spans.append(span)
            covered = end
    return spans


def resolve_relative(text: str, ref: datetime | date) -> list[DateSpan]:
    """The dates a turn's text mentions, resolved against the turn's own date, in order and without duplicates."""
    seen, spans = set(), []
    for span in _scan(text, _as_day(ref)):
        key = (span.start, span.end, span.granularity)
        if key not in seen:
            seen.add(key)
            spans.append(span)
    return spans


def query_window(query: str, now: datetime | date | None = None) -> DateSpan | None:
    """The date or period a question asks about (the narrowest, the first on ties); relative ones only given `now`."""
    spans = _scan(query, None if now is None else _as_day(now))
    return min(spans, key=lambda span: span.end - span.start) if spans else None
