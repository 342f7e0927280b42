"""Candidate duplicates: for a slice of a tenant's entities, the entities most like each one.

Every query is bounded by the slice (a keyset page of live entities in id order) and by a cap per
entity, so one call costs about the same in a tenant of 100 entities or 100k: names by trigram
similarity with their neighbours in name order (forwards and backwards: index range scans of a
fixed length), meaning through the vector index of entity texts. A pair is proposed once, from its
end with the smaller id.

Names are not probed through the trigram index: in a large tenant of similar names ("Customer
1234") one probe examined thousands of rows (10-50 ms each, seconds per slice).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.store.database import Tx, timed
from app.store.index import Model


@dataclass(frozen=True, slots=True)
class Similar:
    """Entity `b` resembles entity `a` (a.id < b.id) by `kind`, with this similarity (0-1)."""

    a: str
    b: str
    kind: str  # "name" | "semantic"
    similarity: float


@dataclass(frozen=True, slots=True)
class Shared:
    """Live entities related to both ends of a pair (either direction), counted, and a few names."""

    count: int
    examples: list[str]


@timed
async def window(tx: Tx, after: str | None, size: int, types: Sequence[str] | None) -> list[str]:
    """Ids of the next `size` live entities after `after` in id order (of `types` only, if given)."""
    rows = await tx.fetch(
        "SELECT e.id::text FROM {s}.entities e WHERE e.deleted_at IS NULL AND ($1::uuid IS NULL OR e.id > $1::uuid)"
        " AND ($3::text[] IS NULL OR e.type = ANY($3::text[])) ORDER BY e.id LIMIT $2",
        after,
        size,
        list(types) if types else None,
    )
    return [r[0] for r in rows]


# The neighbours of an entity in one sort order of live entities (the key and its index), one way.
_NEIGHBOURS = """
    SELECT b.id, b.name FROM (
        SELECT b.id, b.name, b.type FROM {{s}}.entities b
        WHERE {key} {op} {akey} AND b.id <> a.id AND b.deleted_at IS NULL
        ORDER BY {key} {order} LIMIT $3
    ) b WHERE $2::text[] IS NULL OR b.type = ANY($2::text[])
"""


def _neighbours(key: str, op: str, order: str) -> str:
    return _NEIGHBOURS.format(key=key.format(t="b"), akey=key.format(t="a"), op=op, order=order)


@timed
async def by_name(
    tx: Tx, ids: Sequence[str], threshold: float, types: Sequence[str] | None, per_entity: int, neighbours: int
) -> list[Similar]:
    """Per entity of `ids`, up to `per_entity` live entities with a larger id whose names have a
    trigram similarity of at least `threshold` with its name, most similar first, among its
    `neighbours` nearest in name order each way, forwards and backwards (so names that differ at
    their end, or at their start, meet): index range scans, a bounded number per entity."""
    sides = [
        _neighbours("{t}.name_key", ">=", "ASC"),
        _neighbours("{t}.name_key", "<=", "DESC"),
        _neighbours("reverse({t}.name_key)", ">=", "ASC"),
        _neighbours("reverse({t}.name_key)", "<=", "DESC"),
    ]
    rows = await tx.fetch(
        f"""
        SELECT a.id::text, m.id::text, m.similarity FROM {{s}}.entities a
        CROSS JOIN LATERAL (
            SELECT c.id, similarity(a.name, c.name) AS similarity
            FROM ({" UNION ".join(f"({side})" for side in sides)}) c
            WHERE c.id > a.id AND similarity(a.name, c.name) >= $4
            ORDER BY similarity DESC, c.id LIMIT $5
        ) m
        WHERE a.id = ANY($1::uuid[])
        """,
        list(ids),
        list(types) if types else None,
        neighbours,
        threshold,
        per_entity,
    )
    return [Similar(r[0], r[1], "name", r[2]) for r in rows]


@timed
async def by_meaning(
    tx: Tx, model: Model, ids: Sequence[str], threshold: float, types: Sequence[str] | None, per_entity: int
) -> list[Similar]:
    """Per entity of `ids` with an embedded entity text, up to `per_entity` live entities with a larger
    id whose entity texts are nearest to its own, with a cosine similarity of at least `threshold`.

    The model's id and dimensions come from the control plane, never from a caller (see rankings.py)."""
    cast = f"::vector({int(model.dimensions)})"
    await tx.execute("SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true)")
    rows = await tx.fetch(
        f"""
        SELECT w.entity_id::text, n.entity_id::text, 1 - n.distance FROM {{s}}.search_docs w
        CROSS JOIN LATERAL (
            SELECT d.entity_id, d.embedding{cast} <=> w.embedding{cast} AS distance FROM {{s}}.search_docs d
            WHERE d.model_id = {int(model.id)} AND d.observation_id IS NULL AND d.relation_id IS NULL
              AND d.episode_id IS NULL
            ORDER BY d.embedding{cast} <=> w.embedding{cast} LIMIT $2
        ) n
        JOIN {{s}}.entities b ON b.id = n.entity_id AND b.deleted_at IS NULL AND b.id > w.entity_id
                              AND ($4::text[] IS NULL OR b.type = ANY($4::text[]))
        WHERE w.entity_id = ANY($1::uuid[]) AND w.observation_id IS NULL AND w.relation_id IS NULL
          AND w.model_id = {int(model.id)}
          AND 1 - n.distance >= $3
        """,
        list(ids),
        per_entity + 1,  # the nearest is the entity itself
        threshold,
        list(types) if types else None,
    )
    return [Similar(r[0], r[1], "semantic", r[2]) for r in rows]


@timed
async def shared_neighbors(
    tx: Tx, pairs: Sequence[tuple[str, str]], per_entity: int, examples: int
) -> dict[tuple[str, str], Shared]:
    """For each pair, the live entities related to both (but neither end), among the first
    `per_entity` neighbours of each end."""
    if not pairs:
        return {}
    rows = await tx.fetch(
        """
        SELECT p.a::text, p.b::text, count(*), (array_agg(x.name ORDER BY x.name))[1:$4]
        FROM unnest($1::uuid[], $2::uuid[]) AS p(a, b)
        JOIN {s}.entities ea ON ea.id = p.a
        JOIN {s}.entities eb ON eb.id = p.b
        CROSS JOIN LATERAL (
            (SELECT r.end_id AS gid FROM {s}."REL" r WHERE r.start_id = ea.gid
             UNION SELECT r.start_id FROM {s}."REL" r WHERE r.end_id = ea.gid LIMIT $3)
            INTERSECT
            (SELECT r.end_id FROM {s}."REL" r WHERE r.start_id = eb.gid
             UNION SELECT r.start_id FROM {s}."REL" r WHERE r.end_id = eb.gid LIMIT $3)
        ) n
        JOIN {s}.entities x ON x.gid = n.gid AND x.deleted_at IS NULL AND x.gid <> ea.gid AND x.gid <> eb.gid
        GROUP BY p.a, p.b
        """,
        [p[0] for p in pairs],
        [p[1] for p in pairs],
        per_entity,
        examples,
    )
    return {(r[0], r[1]): Shared(r[2], list(r[3])) for r in rows}
