"""What every service shares: the caller's tenant transaction, limits, and record → model shaping."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

import asyncpg

from app.auth.principal import Principal
from app.errors import EngramError
from app.observability.context import CALL, REQUEST_ID
from app.services import models
from app.services.cursors import Cursors
from app.services.indexing import Indexer
from app.store import audit, index, relations
from app.store.database import Database, Tx


@dataclass(frozen=True, slots=True)
class Limits:
    max_batch: int = 100
    max_results: int = 200
    page_size: int = 100  # entities per read_graph page
    observations_per_entity: int = 50  # in listings that carry observations


class Service:
    def __init__(self, db: Database, indexer: Indexer, cursors: Cursors, limits: Limits) -> None:
        self.db = db
        self.indexer = indexer
        self.cursors = cursors
        self.limits = limits

    @asynccontextmanager
    async def tx(self, who: Principal, *, readonly: bool = False, texts: Sequence[str] = ()) -> AsyncIterator[Tx]:
        """One transaction in the caller's tenant; everything a tool call does happens inside it.

        A write ends, in the same transaction, by bringing the search documents of the entities it
        changed up to date and by the call's audit row. `texts` it is likely to index are embedded
        before the transaction opens, so it stays short; the rest wait for the background filler.
        """
        tenant = await self.db.tenant(who.tenant)
        await self.cursors.load(self.db.cursor_keys)
        vectors = await self.indexer.vectors_for(tenant, texts) if texts else index.Vectors(self.indexer.model)
        async with self.db.transaction(tenant, readonly=readonly) as tx:
            yield tx
            if not readonly:
                tx.pending = await index.sync(tx, tx.entities, vectors)
            call = CALL.get()
            if not readonly and call is not None and tx.affected:
                await audit.write(
                    tx,
                    subject=who.subject,
                    client_id=who.client_id,
                    tool=call.tool,
                    affected=tx.affected,
                    duration_ms=round((time.perf_counter() - call.started) * 1000, 3),
                    request_id=REQUEST_ID.get(),
                )
        self.indexer.written(tx.pending)

    def check_batch(self, size: int) -> None:
        if size > self.limits.max_batch:
            raise EngramError("limit", f"at most {self.limits.max_batch} items per call (got {size})")


def summary(row: asyncpg.Record) -> models.EntitySummary:
    return models.EntitySummary(**{field: row[field] for field in models.EntitySummary.model_fields})


def relation(rel: relations.Relation) -> models.Relation:
    p = rel.props
    return models.Relation(
        id=p["id"],
        type=p["type"],
        from_=rel.source,
        to=rel.target,
        from_id=rel.source_id,
        to_id=rel.target_id,
        strength=p.get("strength"),
        notes=p.get("notes"),
        properties=p.get("properties"),
        created_at=p.get("created_at"),
        created_by=p.get("created_by"),
    )
