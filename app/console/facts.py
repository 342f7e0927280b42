"""Which facts an entity page shows: those valid now (the default, where the page edits), those
valid at another moment (`as_of`), or also the ended ones (`include_invalid`) — the two read-only
views the tools' reads offer — and the ended facts each with its interval and the reason history
recorded for its end.

Times in the console's forms are UTC: a `datetime-local` input has no zone, and the pages work
without the script that would know the browser's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict

from app.console.web import query
from app.services import models


class ViewForm(BaseModel):
    """The entity page's query: `as_of=<moment>` or `ended=1` (both at once: `invalid`, as in the
    tools; `filters.moment` says so)."""

    model_config = ConfigDict(extra="ignore")

    as_of: models.AsOf = None
    ended: bool = False


class EndForm(BaseModel):
    """When a fact or a relation stopped being true (default: now), and why (kept in the history)."""

    model_config = ConfigDict(extra="ignore")

    at: models.At = None
    reason: models.WhyEnded = None


@dataclass(frozen=True, slots=True)
class View:
    """What the page shows; only the present (`now`) has forms, since every change acts on now."""

    as_of: datetime | None = None
    ended: bool = False

    @property
    def now(self) -> bool:
        return self.as_of is None and not self.ended

    @property
    def as_of_value(self) -> str:
        """The moment as a `datetime-local` input's value (UTC, to the second)."""
        return local_value(self.as_of) if self.as_of else ""

    @property
    def query(self) -> str:
        """The view's query string (empty for now)."""
        return query(as_of=local_value(self.as_of) if self.as_of else None, ended="1" if self.ended else None)


def local_value(at: datetime) -> str:
    """A moment as `datetime-local` writes it, in UTC: 2024-01-31T12:00:00 (years below 1000 padded)."""
    return at.astimezone(UTC).replace(tzinfo=None, microsecond=0).isoformat()


def utc(at: datetime | None) -> str:
    """A moment as the pages show it: 2024-01-31 12:00:00 UTC."""
    return local_value(at).replace("T", " ") + " UTC" if at else ""


def instant(value: str | None) -> datetime | None:
    """A relation's bound (ISO 8601 text in its properties) as a moment; None when absent or unreadable."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class EndedObservation:
    record: models.ObservationRecord
    reason: str | None


@dataclass(frozen=True, slots=True)
class EndedRelation:
    relation: models.Relation
    valid_from: datetime | None
    valid_until: datetime
    reason: str | None


@dataclass(slots=True)
class Facts:
    """An entity's facts as the page lists them: those not ended (valid now, or beginning later),
    and in the ended-facts view the ended ones apart."""

    observations: list[models.ObservationRecord] = field(default_factory=list)
    relations: list[models.Relation] = field(default_factory=list)
    ended_observations: list[EndedObservation] = field(default_factory=list)
    ended_relations: list[EndedRelation] = field(default_factory=list)


def split(entity: models.Entity, history: Sequence[models.HistoryEntry], now: datetime) -> Facts:
    """Every fact of an `include_invalid` read, the ended ones (`valid_until` ≤ `now`) apart with the
    reason of their latest end among `history` (newest first; a reason older than it is not shown)."""
    observation_reasons, relation_reasons = _reasons(entity.id, history)
    facts = Facts()
    for record in entity.observation_records:
        if record.valid_until is not None and record.valid_until <= now:
            facts.ended_observations.append(EndedObservation(record, observation_reasons.get(record.text)))
        else:
            facts.observations.append(record)
    for rel in entity.relations or []:
        until = instant(rel.valid_until)
        if until is not None and until <= now:
            reason = relation_reasons.get(rel.id)
            facts.ended_relations.append(EndedRelation(rel, instant(rel.valid_from), until, reason))
        else:
            facts.relations.append(rel)
    return facts


def _reasons(eid: str, history: Sequence[models.HistoryEntry]) -> tuple[dict[str, str | None], dict[str, str | None]]:
    """Per observation text and per relation id, the reason given at its latest end (None: none given)."""
    texts: dict[str, str | None] = {}
    relations: dict[str, str | None] = {}
    for entry in history:
        reason = entry.changes.get("reason")
        why = reason if isinstance(reason, str) else None
        if entry.action == "observations_invalidated" and entry.entity_id == eid:
            for text in entry.changes.get("observations", []):
                if isinstance(text, str):
                    texts.setdefault(text, why)
        elif entry.action == "relation_invalidated" and entry.relation_id:
            relations.setdefault(entry.relation_id, why)
    return texts, relations
