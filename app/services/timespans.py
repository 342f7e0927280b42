"""The moments a question names, as half-open UTC ranges: recall lifts the facts that happened then.

Dates ("on 25 May, 2022", "in July 2023", "in 2021", "2023-05-08") and, counted back from the
moment the question is asked about (its `as_of`, else now), relative phrases: "today",
"yesterday", "this/last week|month|year", "last weekend", "last Tuesday", "last May",
"three days ago", "a couple of weeks ago", "recently". A question may also place itself around an
event ("before she moved", "after the race"): `around` finds the phrase, and recall dates the event
by the fact that best matches it. Other languages are not read; such questions rank as any other."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

_MONTHS = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
_MONTH = {name: n for n, name in enumerate(_MONTHS, start=1)} | {name[:3]: n for n, name in enumerate(_MONTHS, 1)}
_M = r"(" + "|".join(sorted(_MONTH, key=len, reverse=True)) + r")\.?"
_DAY_MONTH_YEAR = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?{_M},?\s+(\d{{4}})\b")
_MONTH_DAY_YEAR = re.compile(rf"\b{_M}\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b")
_ISO_DAY = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_MONTH_YEAR = re.compile(rf"\b{_M},?\s+(\d{{4}})\b")
_YEAR = re.compile(r"\b(?:in|of|during|since|year)\s+(\d{4})\b")
DAY_SLACK = timedelta(days=1)  # a day named is that day give or take one (notes are written a day late)


def spans(text: str, now: datetime | None = None) -> list[tuple[datetime, datetime]]:
    """The ranges the text names: days (with a day's slack each way), else months, else years;
    relative phrases counted back from `now` (default: the current time)."""
    t = text.lower()
    if relative := _relative(t, now or datetime.now(UTC)):
        return relative
    days = [(y, m, d) for d, m, y in _DAY_MONTH_YEAR.findall(t)] + [(y, m, d) for m, d, y in _MONTH_DAY_YEAR.findall(t)]
    out = [r for y, m, d in days if (r := _day(int(y), _MONTH[m], int(d)))]
    out += [r for y, m, d in _ISO_DAY.findall(t) if (r := _day(int(y), int(m), int(d)))]
    if out:
        return out
    out = [r for m, y in _MONTH_YEAR.findall(t) if (r := _month(int(y), _MONTH[m]))]
    if out:
        return out
    return [
        (datetime(int(y), 1, 1, tzinfo=UTC), datetime(int(y) + 1, 1, 1, tzinfo=UTC))
        for y in _YEAR.findall(t)
        if 1 <= int(y) < 9999
    ]


def _day(year: int, month: int, day: int) -> tuple[datetime, datetime] | None:
    try:
        start = datetime(year, month, day, tzinfo=UTC)
        return start - DAY_SLACK, start + timedelta(days=1) + DAY_SLACK
    except (ValueError, OverflowError):  # no such day, or at the ends of the calendar
        return None


def _month(year: int, month: int) -> tuple[datetime, datetime] | None:
    if not 1 <= year < 9999:
        return None
    end = datetime(year + 1, 1, 1, tzinfo=UTC) if month == 12 else datetime(year, month + 1, 1, tzinfo=UTC)
    return datetime(year, month, 1, tzinfo=UTC), end


_COUNT = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
          "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "a couple of": 2, "a few": 3, "several": 3}  # fmt: skip
_UNIT_DAYS = {"day": 1, "week": 7, "month": 30, "year": 365}
_AGO = re.compile(
    r"\b(\d{1,3}|" + "|".join(sorted(_COUNT, key=len, reverse=True)) + r")\s+(day|week|month|year)s?\s+ago\b"
)
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_LAST = re.compile(
    r"\b(last|this|past|previous)\s+(week|weekend|month|year|" + "|".join(_WEEKDAYS) + "|" + _M[1:-4] + r")\b"
)
_PLAIN = {"today": (0, 1), "yesterday": (1, 1), "the day before yesterday": (2, 1)}
RECENT = timedelta(days=30)  # "recently", "lately"


def _relative(t: str, now: datetime) -> list[tuple[datetime, datetime]]:
    """The ranges relative phrases of `t` name, counted back from `now`."""
    today = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    out = []
    for phrase, (back, days) in _PLAIN.items():
        if re.search(rf"\b{phrase}\b", t):
            start = today - timedelta(days=back)
            out.append((start - DAY_SLACK, start + timedelta(days=days) + DAY_SLACK))
    for count, unit in _AGO.findall(t):
        n = int(count) if count.isdigit() else _COUNT[count]
        middle, half = today - timedelta(days=n * _UNIT_DAYS[unit]), timedelta(days=max(_UNIT_DAYS[unit] / 2, 1))
        out.append((middle - half, middle + half + timedelta(days=1)))
    for which, what in _LAST.findall(t):
        if span := _calendar(which, what, today):
            out.append(span)
    if not out and re.search(r"\b(recently|lately|these days)\b", t):
        out.append((today - RECENT, today + timedelta(days=1)))
    return out


def _calendar(which: str, what: str, today: datetime) -> tuple[datetime, datetime] | None:
    """ "last week", "this month", "last Tuesday", "last May": the calendar range before (or holding) today."""
    back = which != "this"
    if what in ("week", "weekend"):
        monday = today - timedelta(days=today.weekday()) - timedelta(weeks=back)
        start = monday + timedelta(days=5) if what == "weekend" else monday
        return start - DAY_SLACK, start + timedelta(days=2 if what == "weekend" else 7) + DAY_SLACK
    if what == "month":
        year, month = (today.year, today.month - 1) if back else (today.year, today.month)
        return _month(year - 1, 12) if month == 0 else _month(year, month)
    if what == "year":
        year = today.year - back
        return datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC)
    if what in _WEEKDAYS:
        days = (today.weekday() - _WEEKDAYS.index(what)) % 7 or 7
        start = today - timedelta(days=days)
        return start - DAY_SLACK, start + timedelta(days=1) + DAY_SLACK
    named = _MONTH.get(what.rstrip("."))
    if named is None:
        return None
    year = today.year if named < today.month or (not back and named == today.month) else today.year - 1
    return _month(year, named)


_AROUND = re.compile(r"\b(before|after)\s+((?:[\w'\u2019-]+\s*){1,8})")
_NOT_EVENTS = frozenset({"that", "this", "then", "it", "them", "him", "her", "me", "us", "you"})


def around(text: str) -> tuple[str, str] | None:
    """("before" | "after", the event's words) of a question placed around an event, if it is."""
    found = _AROUND.search(text.lower())
    if found is None:
        return None
    words = found.group(2).split()
    if not words or (len(words) == 1 and words[0] in _NOT_EVENTS) or _relative(" ".join(words), datetime.now(UTC)):
        return None
    return found.group(1), " ".join(words)
