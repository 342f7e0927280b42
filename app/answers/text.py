"""The pieces every concise answer is written with: times, a fact's note, indented text, the last lines.

A concise answer is plain text a model reads: one line per item, no nulls, no scores, names where
they suffice as handles (every tool takes an entity's name where it takes its id), numbers for
episodes (`#12`). Items keep the order the service gave them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

PINNED = "[pinned] "  # marks a pinned fact (pin_facts) where facts are listed


def day(at: datetime) -> str:
    return at.astimezone(UTC).date().isoformat()


def moment(at: datetime) -> str:
    """A day, and its time of day (UTC, to the minute) when it has one."""
    at = at.astimezone(UTC)
    return day(at) if (at.hour, at.minute) == (0, 0) else f"{day(at)} {at:%H:%M}"


def block(text: str) -> str:
    """A text as one item: its further lines indented, so that every item starts a line of its own."""
    return text.replace("\r\n", "\n").replace("\n", "\n  ")


def note(
    when: datetime | None = None,
    source: str | None = None,
    *,
    until: datetime | None = None,
    more_sources: Iterable[str | None] = (),
) -> str:
    """What follows a fact: ` (2023-05-08, D1:3; also D2:4; until 2024-01-01)`, or nothing."""
    parts = []
    if when is not None:
        parts.append(day(when))
    if source:
        parts.append(block(source))
    also = list(dict.fromkeys(s for s in more_sources if s and s != source))
    text = ", ".join(parts)
    if also:
        text += ("; " if text else "") + "also " + ", ".join(block(s) for s in also)
    if until is not None:
        text += ("; " if text else "") + f"until {day(until)}"
    return f" ({text})" if text else ""


def lines(chunks: Sequence[str], *last: str | None) -> str:
    """An answer: its items' chunks (each ending in a newline), then whatever last lines are given."""
    return ("".join(chunks) + "".join(f"{line}\n" for line in last if line)).rstrip("\n")


def more(cursor: str | None, omitted: int = 0, what: str = "") -> str | None:
    """The last line: what is left, and the cursor that fetches it."""
    left = f"… {omitted} more{' ' + what if what else ''}" if omitted else "… more"
    if cursor:
        return f"{left}: cursor={cursor}"
    return f"{left} (raise max_tokens to see them)" if omitted else None


def notices(items: Iterable[str]) -> list[str]:
    return [f"Note: {n}" for n in items]
