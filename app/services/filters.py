"""The filters tools pass to listings and searches: service types, turned into the store's
parameters here, so the transport never names the store."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True, slots=True)
class EntityFilters:
    """find_entities: every given filter must hold (the field order is part of listing cursors' fingerprint)."""

    name_contains: str | None = None
    text_contains: str | None = None
    types: Sequence[str] | None = None
    area: str | None = None
    topic: str | None = None
    subtopic: str | None = None
    certainty_min: int | None = None
    certainty_max: int | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None

    def store_args(self) -> dict[str, Any]:
        """Keyword arguments of `store.entities.find`."""
        return {
            "name_contains": self.name_contains,
            "text_contains": self.text_contains,
            "types": self.types,
            "area": self.area,
            "topic": self.topic,
            "subtopic": self.subtopic,
            "certainty_min": self.certainty_min,
            "certainty_max": self.certainty_max,
            "created_after": self.created_after,
            "created_before": self.created_before,
        }


@dataclass(frozen=True, slots=True)
class SearchFilters:
    """search: hits must pass every given filter (types, area and topic case-insensitively)."""

    types: Sequence[str] | None = None
    area: str | None = None
    topic: str | None = None
    min_certainty: int | None = None
    max_certainty: int | None = None

    def store_args(self) -> dict[str, Any]:
        """Keyword arguments of the rankings in `store.rankings`."""
        return {
            "types": self.types,
            "area": self.area,
            "topic": self.topic,
            "min_certainty": self.min_certainty,
            "max_certainty": self.max_certainty,
        }

    def values(self) -> tuple[Any, ...]:
        """The filters in field order, for a query's fingerprint."""
        return (self.types, self.area, self.topic, self.min_certainty, self.max_certainty)
