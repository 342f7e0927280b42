"""The filters tools pass to listings and searches: service types, turned into the store's
parameters here, so the transport never names the store."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from app.errors import EngramError
from app.store.rankings import Narrowing
from app.store.recall import Scope
from app.store.validity import NOW, When


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
        """Keyword arguments of `store.entities.find`, which are named as these fields."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


# search: hits must pass every given filter. The store's own parameter object, named here for the
# tools (which never name the store); its field order is part of a query's fingerprint.
SearchFilters = Narrowing
# recall: the facts it ranks must pass these (the store's own parameter object, named for the tools).
RecallFilters = Scope


def moment(as_of: datetime | None, include_invalid: bool) -> When:
    """What a read sees: the facts valid now (neither given), valid at `as_of`, or every fact."""
    if as_of is not None and include_invalid:
        raise EngramError("invalid", "give `as_of` or `include_invalid`, not both")
    return When(at=as_of, everything=include_invalid)


def time_range(since: datetime | None, until: datetime | None) -> None:
    """A write-time range [since, until) must not be empty."""
    if since is not None and until is not None and since >= until:
        raise EngramError("invalid", "`since` must be before `until`")
