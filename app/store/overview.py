"""Aggregates over one tenant's graph: the area/topic tree and the counts behind graph_stats."""

from __future__ import annotations

from dataclasses import dataclass

from app.store.database import Tx, timed
from app.store.edges import REL_TYPE


@dataclass(frozen=True, slots=True)
class Category:
    """Live entities of one (area, topic, subtopic); None where they have no such value."""

    area: str | None
    topic: str | None
    subtopic: str | None
    n: int
    area_n: int  # in the whole area
    topic_n: int  # in the whole topic
    total: int  # live entities in all
    groups: int  # the rows there would be without the bounds


@dataclass(frozen=True, slots=True)
class TypeCount:
    type: str
    n: int


@dataclass(frozen=True, slots=True)
class Connected:
    id: str
    name: str
    type: str
    degree: int


@dataclass(frozen=True, slots=True)
class Totals:
    entities: int
    deleted_entities: int
    relations: int
    observations: int


@timed
async def categories(tx: Tx, max_children: int, max_rows: int) -> list[Category]:
    """Live entity counts per (area, topic, subtopic), None where an entity has no such value; bounded.

    At most `max_children` areas, topics per area and subtopics per topic (in name order), and
    `max_rows` rows in all. Each row carries the true counts of its area and topic (`area_n`,
    `topic_n`), the total, and `groups`, the rows there would be without the bounds.
    """
    rows = await tx.fetch(
        """
        WITH g AS (
            SELECT area, topic, subtopic, count(*) AS n FROM {s}.entities WHERE deleted_at IS NULL
            GROUP BY area, topic, subtopic
        ), ranked AS (
            SELECT g.*,
                   sum(n) OVER (PARTITION BY area) AS area_n,
                   sum(n) OVER (PARTITION BY area, topic) AS topic_n,
                   dense_rank() OVER (ORDER BY area NULLS LAST) AS area_rank,
                   dense_rank() OVER (PARTITION BY area ORDER BY topic NULLS LAST) AS topic_rank,
                   row_number() OVER (PARTITION BY area, topic ORDER BY subtopic NULLS LAST) AS subtopic_rank
            FROM g
        )
        SELECT area, topic, subtopic, n, area_n, topic_n,
               (SELECT sum(n) FROM g) AS total, (SELECT count(*) FROM g) AS groups
        FROM ranked
        WHERE area_rank <= $1 AND topic_rank <= $1 AND subtopic_rank <= $1
        ORDER BY area NULLS LAST, topic NULLS LAST, subtopic NULLS LAST
        LIMIT $2
        """,
        max_children,
        max_rows,
    )
    return [Category(*r) for r in rows]


@timed
async def type_counts(tx: Tx, limit: int) -> list[TypeCount]:
    rows = await tx.fetch(
        "SELECT type, count(*) AS n FROM {s}.entities WHERE deleted_at IS NULL"
        " GROUP BY type ORDER BY n DESC, type LIMIT $1",
        limit,
    )
    return [TypeCount(*r) for r in rows]


_LIVE_EDGES = """
    FROM {s}."REL" r
    JOIN {s}.entities se ON se.gid = r.start_id AND se.deleted_at IS NULL
    JOIN {s}.entities te ON te.gid = r.end_id AND te.deleted_at IS NULL
"""


@timed
async def relation_type_counts(tx: Tx, limit: int) -> list[TypeCount]:
    rows = await tx.fetch(
        f"SELECT {REL_TYPE} AS type, count(*) AS n {_LIVE_EDGES} GROUP BY 1 ORDER BY n DESC, 1 LIMIT $1", limit
    )
    return [TypeCount(*r) for r in rows]


@timed
async def most_connected(tx: Tx, limit: int) -> list[Connected]:
    rows = await tx.fetch(
        f"""
        SELECT e.id::text AS id, e.name, e.type, d.degree FROM (
            SELECT g, count(*) AS degree FROM (
                SELECT r.start_id AS g {_LIVE_EDGES} UNION ALL SELECT r.end_id {_LIVE_EDGES}
            ) ends GROUP BY g ORDER BY degree DESC LIMIT $1
        ) d JOIN {{s}}.entities e ON e.gid = d.g ORDER BY d.degree DESC, e.name
        """,
        limit,
    )
    return [Connected(*r) for r in rows]


@timed
async def totals(tx: Tx) -> Totals:
    row = await tx.fetchrow(
        f"""
        SELECT (SELECT count(*) FROM {{s}}.entities WHERE deleted_at IS NULL) AS entities,
               (SELECT count(*) FROM {{s}}.entities WHERE deleted_at IS NOT NULL) AS deleted_entities,
               (SELECT count(*) {_LIVE_EDGES}) AS relations,
               (SELECT count(*) FROM {{s}}.observations o JOIN {{s}}.entities e ON e.id = o.entity_id
                 AND e.deleted_at IS NULL) AS observations
        """
    )
    assert row is not None
    return Totals(*row)
