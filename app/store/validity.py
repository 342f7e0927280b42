"""Which facts a read sees: those valid at one moment (now, or `as_of`), or every fact.

Observations and relations carry an optional validity interval ``[valid_from, valid_until)``; a
NULL bound is open, so a fact without one is valid at every moment. Observations hold the bounds
in their own columns; relations in their edge's properties, and, for the edges that have one, in
``rel_intervals`` (migration 0013), which is what SQL tests (agtype bounds would be text).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True, slots=True)
class When:
    """The moment a read looks at: `at` (None: the transaction's time), or with `everything` every
    fact whatever its interval (then `at` is unused)."""

    at: datetime | None = None
    everything: bool = False

    def params(self) -> tuple[Any, ...]:
        """The two parameters `holds` reads: the moment (None: now) and whether every fact counts."""
        return (self.at, self.everything)


NOW = When()
EVERYTHING = When(everything=True)


def valid_at(alias: str, at: str) -> str:
    """SQL: the row `alias` (with valid_from / valid_until columns) is valid at the timestamptz
    parameter `at` (NULL: now)."""
    moment = f"coalesce({at}::timestamptz, now())"
    return (
        f"({alias}.valid_from IS NULL OR {alias}.valid_from <= {moment})"
        f" AND ({alias}.valid_until IS NULL OR {alias}.valid_until > {moment})"
    )


def holds(alias: str, at: str, everything: str) -> str:
    """SQL: the observation `alias` counts for a read with parameters (`at`, `everything`)."""
    return f"({everything}::boolean OR ({valid_at(alias, at)}))"


def edge_holds(edge: str, at: str, everything: str, schema: str = "{s}") -> str:
    """SQL: the edge whose graph id is `edge` counts for a read with parameters (`at`, `everything`):
    it has no interval, or its interval holds the moment. Cheap while `rel_intervals` is small."""
    return (
        f"({everything}::boolean OR NOT EXISTS (SELECT 1 FROM {schema}.rel_intervals ri"
        f" WHERE ri.edge = {edge} AND NOT ({valid_at('ri', at)})))"
    )
