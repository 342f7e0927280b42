"""History entries as a person reads them: who, when, and what changed in a sentence."""

from __future__ import annotations

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


def who(actor: str, me: str) -> str:
    return "you" if actor == me else actor


def _short(value: Any) -> str:
    text = "(empty)" if value in (None, "", {}) else str(value)
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 1] + "…"


def _why(changes: dict[str, Any]) -> str:
    """An invalidation's end time and reason, when they were given."""
    out = f" (until {_short(changes['valid_until'])})" if changes.get("valid_until") else ""
    return out + (f", because {_short(changes['reason'])}" if changes.get("reason") else "")


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
        case "observations_invalidated":
            texts = c.get("observations", [])
            text = f"ended {len(texts)} observation{'s' if len(texts) != 1 else ''}: " + "; ".join(
                _short(t) for t in texts[:5]
            )
            text += _why(c)
        case "relation_invalidated":
            text = f"ended {_short(c.get('from'))} —{_short(c.get('type'))}→ {_short(c.get('to'))}" + _why(c)
        case "aliases_added" | "aliases_removed":
            verb = "added" if entry.action == "aliases_added" else "removed"
            text = f"{verb} alias{'es' if len(c.get('aliases', [])) != 1 else ''} " + ", ".join(
                _short(a) for a in c.get("aliases", [])[:10]
            )
        case "merged":
            names = ", ".join(_short(m.get("name")) for m in c.get("merged", [])[:10])
            text = f"merged {names} into it"
            if c.get("aliases_added"):
                text += "; aliases gained: " + ", ".join(_short(a) for a in c["aliases_added"][:10])
        case "relation_moved" | "relation_folded":
            text = f"{_short(c.get('from'))} —{_short(c.get('type'))}→ {_short(c.get('to'))}"
            merged, into = _short(c.get("merged", {}).get("name")), _short(c.get("into", {}).get("name"))
            if entry.action == "relation_moved":
                text = f"moved {text} to {into}, as {merged} was merged into it"
            else:
                text = f"folded {text} into the same relation with {into}, as {merged} was merged into it"
        case "merged_into":
            text = f"merged it into {_short(c.get('into', {}).get('name'))}"
        case "deleted" | "restored":
            text = entry.action
        case _:
            text = entry.action.replace("_", " ") + (f": {_short(c)}" if c else "")
    return Told(entry.at, who(entry.actor, me), entry.action, text)
