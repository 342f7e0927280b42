"""What every service shares: the caller's tenant transaction, limits, and record → model shaping."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

from app.auth.principal import ADMIN, Principal
from app.config import Settings
from app.errors import EngramError
from app.ids import SYSTEM
from app.observability.context import CALL
from app.services import audit_rows
from app.services.cursors import Cursors
from app.services.fairness import Fairness, refuse
from app.services.indexing import Indexer
from app.store import changes, index
from app.store import limits as tenant_limits
from app.store.database import Database, Tx


@dataclass(frozen=True, slots=True)
class Limits:
    max_batch: int = 100
    max_results: int = 200
    page_size: int = 100  # entities per read_graph page
    observations_per_entity: int = 50  # in listings that carry observations
    max_batch_texts: int = 1000  # observations in one write call
    page_relations: int = 1000  # relations per read_graph page
    walk_level_edges: int = 5000  # edges a walk reads per level
    walk_frontier: int = 1000  # entities a walk expands per level
    hierarchy_max_children: int = 100
    hierarchy_max_nodes: int = 1000
    query_rows: int = 200  # rows a query_graph call returns
    query_bytes: int = 1024 * 1024  # and about this much JSON
    query_ms: int = 2000  # its statement's time bound
    query_value_bytes: int = 128 * 1024  # the largest value its query may build
    query_sort_rows: int = 10_000  # rows its sorts may take
    query_sort_key_bytes: int = 512  # and the largest key they sort by
    query_running: int = 4  # query_graph calls running at once in a process
    query_tenant_running: int = 2  # and of one tenant

    @classmethod
    def from_settings(cls, settings: Settings) -> Limits:
        return cls(
            max_batch=settings.max_batch,
            max_results=settings.max_results,
            page_size=settings.graph_page_size,
            observations_per_entity=settings.observations_per_entity,
            max_batch_texts=settings.max_batch_texts,
            page_relations=settings.graph_page_relations,
            walk_level_edges=settings.walk_level_edges,
            walk_frontier=settings.walk_frontier,
            hierarchy_max_children=settings.hierarchy_max_children,
            hierarchy_max_nodes=settings.hierarchy_max_nodes,
            query_rows=settings.query_graph_max_rows,
            query_bytes=settings.query_graph_max_bytes,
            query_ms=settings.query_graph_timeout_ms,
            query_value_bytes=settings.query_graph_max_value_bytes,
            query_sort_rows=settings.query_graph_max_sorted_rows,
            query_sort_key_bytes=settings.query_graph_max_sort_key_bytes,
            query_running=settings.query_graph_max_running,
            query_tenant_running=settings.query_graph_tenant_running,
        )


class Service:
    def __init__(
        self, db: Database, indexer: Indexer, cursors: Cursors, limits: Limits, fairness: Fairness | None = None
    ) -> None:
        self.db = db
        self.indexer = indexer
        self.cursors = cursors
        self.limits = limits
        self.fairness = fairness  # quotas on writes; None: none

    @asynccontextmanager
    async def tx(
        self,
        who: Principal,
        *,
        readonly: bool = False,
        texts: Sequence[str] = (),
        primary: bool = False,
        everyone: bool = False,
    ) -> AsyncIterator[Tx]:
        """One transaction in the caller's tenant; everything a tool call does happens inside it.

        A write ends, in the same transaction, by bringing the search documents of the entities,
        relations and episodes it changed up to date, by adding its growth to the tenant's usage
        totals (refused past a quota), by the call's audit row, and by announcing the entities it
        touched, which PostgreSQL delivers to every server's subscribers on commit
        (app/store/changes.py). `texts` it is likely to index are embedded
        before the transaction opens, so it stays short; the rest wait for the background filler.

        It sees the tenant's shared memory and the caller's own private memory, never another
        principal's (row-level security, docs/private-memory.md); with `everyone`, an administrator's
        erasure (a purge, a private memory erased) reaches every principal's rows — its callers
        answer counts, never a row's text.

        A read may run on the tenant's cell's standby (unless `primary`), once the standby has
        replayed this caller's own last write (docs/scaling.md, "Reads from standbys").
        """
        if everyone and ADMIN not in who.scopes:
            raise EngramError("forbidden", "only the tenant's administrators erase what others keep privately")
        tenant = await self.db.tenant(who.tenant)
        await self.cursors.load(self.db.cursor_keys)
        policy = await self.fairness.policy(tenant) if self.fairness and not readonly else None
        vectors = await self.indexer.vectors_for(tenant, texts) if texts else index.Vectors(self.indexer.model)
        async with self.db.transaction(
            tenant,
            readonly=readonly,
            principal=who.subject,
            standby=readonly and not primary,
            viewer=SYSTEM if everyone else who.key,
        ) as tx:
            yield tx
            if not readonly:
                tx.pending = await index.sync(
                    tx,
                    vectors,
                    entities=tx.entities,
                    relations=tx.relations,
                    episodes=tx.episodes,
                    renamed=tx.renamed,
                )
            if not readonly and tx.growth:  # the totals stay right even where quotas are not checked
                totals = await tenant_limits.grow(tx, tx.growth)
                if policy is not None:
                    Fairness.check_quotas(policy, totals, tx.growth)
            if not readonly and CALL.get() is not None and tx.affected:
                await audit_rows.write(tx, audit_rows.fields(who), tx.affected)
            if not readonly and tx.touched:  # delivered on commit to every server's subscribers
                await changes.announce(tx, tx.touched)
        self.indexer.written(tx.pending)

    def check_batch(self, size: int, texts: int = 0) -> None:
        """Refuse a write call with more items, or observations over all its items, than allowed."""
        if size > self.limits.max_batch:
            raise refuse("batch_items", f"at most {self.limits.max_batch} items per call (got {size})")
        if texts > self.limits.max_batch_texts:
            raise refuse(
                "batch_texts",
                f"at most {self.limits.max_batch_texts} observations per call over all items (got {texts}); "
                "split the call",
            )
