"""The filters tools pass to listings, searches and recall: service types, mapped onto the store's
here, so the transport never names the store."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from app.errors import EngramError
from app.store import scopes
from app.store.validity import NOW, When

_FACT_FIELDS = ("sources", "since", "until")


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
    sources: Sequence[str] | None = None
    since: datetime | None = None
    until: datetime | None = None
    when: When = NOW

    def store_args(self) -> dict[str, Any]:
        """Keyword arguments of `store.listings.find`, which are named as these fields, the fact
        filter (sources, since, until) as one."""
        args = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _FACT_FIELDS}
        return args | {"facts": scopes.FactFilter(self.sources, self.since, self.until)}


@dataclass(frozen=True, slots=True)
class Scope:
    """search and recall: what the texts they rank must pass; None: anything. Types, area and topic
    match case-insensitively; `sources` and [since, until) are a fact's own source and time; `when`
    the moment. Recall ranks facts, which have no area, topic or certainty of their own: it narrows
    by the others (its tool takes no more)."""

    types: Sequence[str] | None = None
    area: str | None = None
    topic: str | None = None
    min_certainty: int | None = None
    max_certainty: int | None = None
    sources: Sequence[str] | None = None
    since: datetime | None = None
    until: datetime | None = None
    when: When = NOW

    @property
    def by_facts(self) -> bool:
        """Only facts from given sources or write times can pass (an entity's name cannot)."""
        return self.store().facts.given

    def store(self) -> scopes.Scope:
        """The store's scope: the same filters, the fact filter as one."""
        facts = scopes.FactFilter(self.sources, self.since, self.until)
        return scopes.Scope(self.types, self.area, self.topic, self.min_certainty, self.max_certainty, facts, self.when)


def moment(as_of: datetime | None, include_invalid: bool) -> When:
    """What a read sees: the facts valid now (neither given), valid at `as_of`, or every fact."""
    if as_of is not None and include_invalid:
        raise EngramError("invalid", "give `as_of` or `include_invalid`, not both")
    return When(at=as_of, everything=include_invalid)


def time_range(since: datetime | None, until: datetime | None) -> None:
    """A write-time range [since, until) must not be empty."""
    if since is not None and until is not None and since >= until:
        raise EngramError("invalid", "`since` must be before `until`")
