"""One level of a breadth-first walk over the edge table.

Multi-hop walks go level by level here instead of through Cypher's variable-length patterns,
which on AGE 1.5 rebuild a whole-graph cache in every backend after any committed write
(see docs/architecture.md). Each level is one indexed query over ``REL`` (start_id / end_id).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from app.store.database import Tx, timed
from app.store.relations import REL_TYPE


@dataclass(frozen=True, slots=True)
class Step:
    """An edge leaving the frontier: `node` was there, `other` is where the edge leads."""

    node: str
    other: str
    source: str  # the edge's real direction
    target: str
    props: dict[str, Any]


@timed
async def expand(
    tx: Tx,
    frontier: Sequence[str],
    *,
    outgoing: bool,
    incoming: bool,
    types: Sequence[str] | None,
    limit: int | None = None,
) -> list[Step]:
    """Edges from (and/or into) the frontier's vertices whose other end is a live entity."""
    rows = await tx.fetch(
        f"""
        SELECT r.start_id::text AS a, r.end_id::text AS b, r.properties AS rel, true AS out
        FROM {{s}}."REL" r JOIN {{s}}.entities e ON e.gid = r.end_id AND e.deleted_at IS NULL
        WHERE $2 AND r.start_id = ANY($1::text[]::ag_catalog.graphid[])
          AND ($4::text[] IS NULL OR {REL_TYPE} = ANY($4))
        UNION ALL
        SELECT r.start_id::text, r.end_id::text, r.properties, false
        FROM {{s}}."REL" r JOIN {{s}}.entities e ON e.gid = r.start_id AND e.deleted_at IS NULL
        WHERE $3 AND r.end_id = ANY($1::text[]::ag_catalog.graphid[])
          AND ($4::text[] IS NULL OR {REL_TYPE} = ANY($4))
        LIMIT $5
        """,
        list(frontier),
        outgoing,
        incoming,
        list(types) if types else None,
        limit,
    )
    return [Step(a if out else b, b if out else a, a, b, orjson.loads(rel)) for a, b, rel, out in rows]
