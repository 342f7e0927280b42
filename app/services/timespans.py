"""The moments a question names ("on 25 May, 2022", "in July 2023", "in 2021", "2023-05-08"), as
half-open UTC ranges: recall lifts the facts that happened then. Relative phrases ("last May") and
other languages are not read; such questions rank as any other."""

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


def spans(text: str) -> list[tuple[datetime, datetime]]:
    """The ranges the text names: days (with a day's slack each way), else months, else years."""
    t = text.lower()
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
