"""History entries as a person reads them: who, when, and what changed in a sentence."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.services.models import HistoryEntry

MAX_SHOWN = 160  # characters of a value shown in a sentence


@dataclass(frozen=True, slots=True)
class Told:
    at: datetime
    actor: str
    action: str
    text: str


@dataclass(frozen=True, slots=True)
class Author:
    actor: str
    at: datetime


def who(actor: str, me: str) -> str:
    return "you" if actor == me else actor


def _short(value: Any) -> str:
    text = "(empty)" if value in (None, "", {}) else str(value)
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 1] + "…"


def describe(entry: HistoryEntry, me: str) -> Told:
    c = entry.changes
    match entry.action:
        case "created":
            text = f"created it as {_short(c.get('name'))} ({_short(c.get('type'))})"
        case "updated":
            parts = [f"{field} from {_short(old)} to {_short(new)}" for field, (old, new) in sorted(c.items())]
            text = "changed " + "; ".join(parts)
        case "observations_added" | "observations_removed":
            verb = "added" if entry.action == "observations_added" else "removed"
            texts = c.get("observations", [])
            text = f"{verb} {len(texts)} observation{'s' if len(texts) != 1 else ''}: " + "; ".join(
                _short(t) for t in texts[:5]
            )
        case "related" | "unrelated":
            verb = "connected" if entry.action == "related" else "disconnected"
            text = f"{verb} {_short(c.get('from'))} —{_short(c.get('type'))}→ {_short(c.get('to'))}"
        case "deleted" | "restored":
            text = entry.action
        case _:
            text = entry.action.replace("_", " ") + (f": {_short(c)}" if c else "")
    return Told(entry.at, who(entry.actor, me), entry.action, text)


def observation_authors(entries: Sequence[HistoryEntry], me: str) -> dict[str, Author]:
    """Who added each observation and when, as far as the history read goes back (newest first in)."""
    out: dict[str, Author] = {}
    for entry in entries:
        if entry.action == "observations_added":
            for text in entry.changes.get("observations", []):
                out.setdefault(text, Author(who(entry.actor, me), entry.at))
    return out
