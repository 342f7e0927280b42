"""What merge_entities changes beyond fields: observations moved, edges re-pointed, merged entities marked.

Edges are rows of the AGE label table ``REL``; a merge re-points them by rewriting their start and
end graph ids in place, so a relation keeps its id, type and metadata. The unique index on
(start, end, type) would refuse an edge that becomes a copy of another: the services fold those
first (app/services/merges.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from app.store.database import Tx, timed
from app.store.edges import REL_TYPE


@dataclass(frozen=True, slots=True)
class Edge:
    """A stored edge, whatever state its ends are in."""

    gid: str  # the edge's own graph id
    start: str  # graph ids of its ends
    end: str
    props: dict[str, Any]  # id, type, strength?, notes?, properties?, created_at, created_by

    @property
    def type(self) -> str:
        return self.props["type"]


@timed
async def edges_touching(tx: Tx, gids: Sequence[str], limit: int) -> list[Edge]:
    """Edges with either end among `gids` (live ends or not), oldest first, at most `limit`."""
    rows = await tx.fetch(
        """
        SELECT r.id::text, r.start_id::text, r.end_id::text, r.properties FROM {s}."REL" r
        WHERE r.start_id = ANY($1::text[]::ag_catalog.graphid[]) OR r.end_id = ANY($1::text[]::ag_catalog.graphid[])
        ORDER BY r.id LIMIT $2
        """,
        list(gids),
        limit,
    )
    return [Edge(r[0], r[1], r[2], orjson.loads(r[3])) for r in rows]


@timed
async def edges_by_keys(tx: Tx, keys: Sequence[tuple[str, str, str]]) -> dict[tuple[str, str, str], Edge]:
    """Stored edges by (start gid, end gid, type)."""
    if not keys:
        return {}
    rows = await tx.fetch(
        f"""
        SELECT r.id::text, r.start_id::text, r.end_id::text, r.properties FROM {{s}}."REL" r
        JOIN unnest($1::text[], $2::text[], $3::text[]) AS k(a, b, t)
          ON r.start_id = k.a::ag_catalog.graphid AND r.end_id = k.b::ag_catalog.graphid AND {REL_TYPE} = k.t
        """,
        [k[0] for k in keys],
        [k[1] for k in keys],
        [k[2] for k in keys],
    )
    edges = [Edge(r[0], r[1], r[2], orjson.loads(r[3])) for r in rows]
    return {(e.start, e.end, e.type): e for e in edges}


@timed
async def delete_edges(tx: Tx, gids: Sequence[str]) -> None:
    if gids:
        await tx.execute(
            'DELETE FROM {s}."REL" WHERE id = ANY($1::text[]::ag_catalog.graphid[])',
            list(gids),
        )


@timed
async def rewrite_edges(tx: Tx, edges: Sequence[Edge]) -> None:
    """Store these edges' ends and properties as given (by edge graph id)."""
    if not edges:
        return
    await tx.execute(
        """
        UPDATE {s}."REL" r SET start_id = u.a::ag_catalog.graphid, end_id = u.b::ag_catalog.graphid,
            properties = u.p::ag_catalog.agtype
        FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS u(id, a, b, p)
        WHERE r.id = u.id::ag_catalog.graphid
        """,
        [e.gid for e in edges],
        [e.start for e in edges],
        [e.end for e in edges],
        [orjson.dumps(e.props).decode() for e in edges],
    )


@dataclass(frozen=True, slots=True)
class EdgeChange:
    """A relation a merge re-pointed or folded, as it was: the history of its ends tells it."""

    relation_id: str
    type: str
    start: str  # graph ids of its ends before the merge
    end: str
    merged_is_start: bool  # which end was the merged entity; the other stays (it is not merged)
    folded_into: str | None  # the id of the relation it was folded into; None when re-pointed


@timed
async def record_edge_changes(tx: Tx, changes: Sequence[EdgeChange], into_id: str, into_name: str, actor: str) -> None:
    """One history row per re-pointed or folded relation, in one statement: `relation_moved` or
    `relation_folded`, on the end that stays (entity_id) and the merged end it left (other_id), so
    both ends' history tells it; the changes name the relation as it was and the survivor. The ends'
    names are read here by graph id, deleted ends included (a relation may touch a deleted entity)."""
    if not changes:
        return
    tx.affected += [c.relation_id for c in changes]
    tx.relations += [c.relation_id for c in changes]
    await tx.execute(
        """
        INSERT INTO {s}.history (entity_id, other_id, relation_id, action, changes, actor)
        SELECT CASE WHEN u.m THEN b.id ELSE a.id END, CASE WHEN u.m THEN a.id ELSE b.id END, u.rel,
            CASE WHEN u.folded IS NULL THEN 'relation_moved' ELSE 'relation_folded' END,
            jsonb_build_object(
                'type', u.type, 'from', a.name, 'to', b.name,
                'merged', CASE WHEN u.m THEN jsonb_build_object('id', a.id, 'name', a.name)
                               ELSE jsonb_build_object('id', b.id, 'name', b.name) END,
                'into', jsonb_build_object('id', $7::uuid, 'name', $8::text)
            ) || CASE WHEN u.folded IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('folded_into', u.folded) END,
            $9
        FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::boolean[], $6::uuid[])
            WITH ORDINALITY AS u(rel, type, a, b, m, folded, n)
        JOIN {s}.entities a ON a.gid = u.a::ag_catalog.graphid
        JOIN {s}.entities b ON b.gid = u.b::ag_catalog.graphid
        ORDER BY u.n
        """,
        [c.relation_id for c in changes],
        [c.type for c in changes],
        [c.start for c in changes],
        [c.end for c in changes],
        [c.merged_is_start for c in changes],
        [c.folded_into for c in changes],
        into_id,
        into_name,
        actor,
    )


@timed
async def count_observations(tx: Tx, entity_ids: Sequence[str], up_to: int) -> int:
    """Observations of these entities, counted up to `up_to`."""
    return await tx.fetchval(
        "SELECT count(*) FROM (SELECT 1 FROM {s}.observations WHERE entity_id = ANY($1::uuid[]) LIMIT $2) o",
        list(entity_ids),
        up_to,
    )


@timed
async def move_observations(tx: Tx, from_ids: Sequence[str], to_id: str) -> list[str]:
    """Append the observations of `from_ids` (in that order, each oldest first) to `to_id`, with their
    authors and times, skipping texts it holds already; then delete them from `from_ids`. Returns the
    texts `to_id` gained."""
    added = await tx.fetch(
        """
        INSERT INTO {s}.observations (entity_id, content, created_at, created_by)
        SELECT $2, o.content, o.created_at, o.created_by FROM {s}.observations o
        WHERE o.entity_id = ANY($1::uuid[])
        ORDER BY array_position($1::uuid[], o.entity_id), o.id
        ON CONFLICT (entity_id, md5(content)) DO NOTHING
        RETURNING content
        """,
        list(from_ids),
        to_id,
    )
    removed = await tx.fetch(
        "DELETE FROM {s}.observations WHERE entity_id = ANY($1::uuid[]) RETURNING octet_length(content)",
        list(from_ids),
    )
    tx.growth.observations += len(added) - len(removed)
    tx.growth.text_bytes += sum(len(r[0].encode()) for r in added) - sum(r[0] for r in removed)
    return [r[0] for r in added]


@timed
async def mark_merged(tx: Tx, ids: Sequence[str], into: str) -> None:
    """Point `ids` (already soft-deleted), and whatever was merged into them before, at `into`, so a
    lookup by any of their ids leads to it in one step."""
    await tx.execute(
        "UPDATE {s}.entities SET merged_into = $2 WHERE id = ANY($1::uuid[]) OR merged_into = ANY($1::uuid[])",
        list(ids),
        into,
    )


@timed
async def merged_into(tx: Tx, ids: Sequence[str]) -> dict[str, str]:
    """For those of `ids` that were merged into another entity: that entity's id."""
    rows = await tx.fetch(
        "SELECT id::text, merged_into::text FROM {s}.entities WHERE id = ANY($1::uuid[]) AND merged_into IS NOT NULL",
        list(ids),
    )
    return {r[0]: r[1] for r in rows}


@timed
async def set_merged_into(tx: Tx, pairs: Sequence[tuple[str, str]]) -> None:
    """Record (entity id, survivor id): a deleted entity merged into another, as an engram file says
    (a merge marks its own in `mark_merged`)."""
    if pairs:
        await tx.execute(
            "UPDATE {s}.entities e SET merged_into = p.survivor FROM unnest($1::uuid[], $2::uuid[]) AS p(id, survivor)"
            " WHERE e.id = p.id AND e.deleted_at IS NOT NULL",
            [p[0] for p in pairs],
            [p[1] for p in pairs],
        )
