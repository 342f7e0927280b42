"""Embedding bookkeeping: the models the control plane knows, and the reads and writes of the
background filler and `engram reindex` (documents waiting for a vector, vectors stored).

Vector indexes are partial per model: ``search_docs_vec_<model id>`` over
``embedding::vector(<dims>)`` (see rankings.py); building one is `build_vector_index`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg

from app.store.database import Tenant, Tx, timed
from app.store.index import Model, Vector, vector_value
from app.store.pool import Pool

# Tenants looked at per statement when listing them (each one index probe for "pending only").
TENANT_PAGE = 500


class ModelRefused(Exception):
    """The database refused to record a model: one of the same name is known with another size."""


@dataclass(frozen=True, slots=True)
class Doc:
    """A search document to embed: its id, its text, and the hash of the text."""

    id: int
    body: str
    body_hash: bytes


# --- models ------------------------------------------------------------------------------------


@timed
async def register_model(db: Pool, name: str, dimensions: int) -> tuple[Model, str]:
    """Record the model this server embeds with; returns it and the name of the current model."""
    async with db.connection() as lease:
        try:
            row = await lease.conn.fetchrow("SELECT * FROM engram.register_embedding_model($1, $2)", name, dimensions)
        except asyncpg.RaiseError as exc:
            raise ModelRefused(str(exc)) from exc
    assert row is not None
    return Model(row["model_id"], name, dimensions), row["current_name"]


@timed
async def current_model_name(db: Pool) -> str | None:
    async with db.connection() as lease:
        return await lease.conn.fetchval("SELECT name FROM engram.embedding_models WHERE current_since IS NOT NULL")


@timed
async def make_current(db: Pool, model: Model) -> None:
    """After every tenant's texts carry this model's vectors: the other models' indexes go."""
    async with db.pool.acquire() as conn, conn.transaction():  # minutes, by design: no call deadline
        await conn.execute("SET LOCAL statement_timeout = 0")
        await conn.execute("SELECT engram.make_embedding_model_current($1)", model.id)


@timed
async def build_vector_index(tx: Tx, model: Model) -> None:
    """The tenant's HNSW index for `model`, if missing (minutes for a large tenant)."""
    await tx.execute("SET LOCAL statement_timeout = 0")
    await tx.execute("SELECT engram.index_tenant_vectors($1)", model.id)


# --- the background filler and `engram reindex` ------------------------------------------------------


@timed
async def tenants(db: Pool, *, pending_only: bool) -> list[Tenant]:
    """The tenants of one cell's database (`db`, the pool of one of the server's `Database.cells`) that the
    filler (pending only) or `engram reindex` (all) works through, in creation order, a page per
    statement (the control database lists every tenant; those of other cells are left out)."""
    found: list[Tenant] = []
    after: tuple[object, object] = (None, None)
    while True:
        async with db.connection() as lease:
            rows = await lease.conn.fetch(
                """WITH s AS (SELECT * FROM engram.search_tenants($1, $2, $3, $4))
                   SELECT s.*, s.tenant_id IN (SELECT engram.tenants_here((SELECT array_agg(tenant_id) FROM s))) AS here
                   FROM s ORDER BY s.created_at, s.tenant_id""",
                pending_only,
                *after,
                TENANT_PAGE,
            )
        found += [Tenant(str(r["tenant_id"]), r["key"], r["schema_name"], db.name) for r in rows if r["here"]]
        if len(rows) < TENANT_PAGE:
            return found
        after = (rows[-1]["created_at"], rows[-1]["tenant_id"])


@timed
async def adopt_model(db: Pool, model: Model, current: bool) -> None:
    """Copy the control database's record of `model` to one cell's database, under the same id."""
    async with db.connection() as lease:
        await lease.conn.execute(
            "SELECT engram.adopt_embedding_model($1, $2, $3, $4)", model.id, model.name, model.dimensions, current
        )


@timed
async def pending_generation(tx: Tx) -> int | None:
    return await tx.fetchval("SELECT generation FROM {s}.index_pending")


@timed
async def clear_pending(tx: Tx, generation: int) -> None:
    """Drop the tenant's marker unless a write added work since `generation` was read."""
    await tx.execute("DELETE FROM {s}.index_pending WHERE generation = $1", generation)


@timed
async def docs_to_embed(tx: Tx, model: Model | None, after_id: int, limit: int) -> list[Doc]:
    """Texts in id order after `after_id` that lack a vector (model None), or lack one of `model`."""
    if model is None:
        rows = await tx.fetch(
            "SELECT id, body, body_hash FROM {s}.search_docs WHERE model_id IS NULL AND id > $1 ORDER BY id LIMIT $2",
            after_id,
            limit,
        )
    else:
        rows = await tx.fetch(
            "SELECT id, body, body_hash FROM {s}.search_docs"
            " WHERE model_id IS DISTINCT FROM $3 AND id > $1 ORDER BY id LIMIT $2",
            after_id,
            limit,
            model.id,
        )
    return [Doc(*r) for r in rows]


@timed
async def count_to_embed(tx: Tx, model: Model | None) -> int:
    if model is None:
        return await tx.fetchval("SELECT count(*) FROM {s}.search_docs WHERE model_id IS NULL")
    return await tx.fetchval("SELECT count(*) FROM {s}.search_docs WHERE model_id IS DISTINCT FROM $1", model.id)


@timed
async def store_vectors(tx: Tx, model: Model, items: Sequence[tuple[int, bytes, Vector]]) -> int:
    """Set (doc id, text hash, vector) where the text is still the one embedded; returns rows set."""
    result = await tx.execute(
        """
        UPDATE {s}.search_docs d SET model_id = $4, embedding = u.embedding
        FROM unnest($1::bigint[], $2::bytea[], $3::vector[]) AS u(id, body_hash, embedding)
        WHERE d.id = u.id AND d.body_hash = u.body_hash
        """,
        [i[0] for i in items],
        [i[1] for i in items],
        [vector_value(i[2]) for i in items],
        model.id,
    )
    return int(result.rsplit(" ", 1)[-1])


@timed
async def entity_ids_after(tx: Tx, after: str | None, limit: int) -> list[str]:
    """Live and deleted entities alike, in id order: `engram reindex` rebuilds all their documents."""
    rows = await tx.fetch(
        "SELECT id::text FROM {s}.entities WHERE $1::uuid IS NULL OR id > $1::uuid ORDER BY id LIMIT $2", after, limit
    )
    return [r[0] for r in rows]


@timed
async def episode_ids_after(tx: Tx, after: int | None, limit: int) -> list[int]:
    """Episodes in id order: `engram reindex` rebuilds their documents too."""
    rows = await tx.fetch(
        "SELECT id FROM {s}.episodes WHERE $1::bigint IS NULL OR id > $1 ORDER BY id LIMIT $2", after, limit
    )
    return [r[0] for r in rows]
