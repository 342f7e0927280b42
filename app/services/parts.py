"""The items of the answers a budget cuts that hold items of several kinds, in the order they print:
the services fit them (app/services/budget.py) and the forms print them (app/answers/), from the
one list made here."""

from __future__ import annotations

from app.services.models import (
    Entity,
    EntitySummary,
    HistoryEntry,
    Neighbor,
    NeighborsResult,
    ObservationRecord,
    Relation,
    SubgraphResult,
)

EntityPart = Entity | ObservationRecord | Relation | HistoryEntry
WalkItem = EntitySummary | Neighbor
SubgraphItem = EntitySummary | Relation


def entity_parts(e: Entity) -> list[EntityPart]:
    """An entity read whole: its own fields, then each fact, relation and change."""
    return [e, *e.observation_records, *(e.relations or []), *(e.history or [])]


def walk_items(r: NeighborsResult) -> list[WalkItem]:
    """A walk: its start (the complete record carries it), then each neighbour, nearest first."""
    return [r.start, *r.neighbors]


def subgraph_items(r: SubgraphResult) -> list[SubgraphItem]:
    """The entities, then the relations among them."""
    return [*r.entities, *r.relations]
