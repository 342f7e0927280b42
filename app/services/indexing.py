"""Keeping embeddings right: the model a server embeds with, vectors for writes, the background
filler of pending texts, and `engram reindex`."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from app.config import MAIN_CELL, Settings
from app.embeddings.embedder import Embedder, ProviderDown
from app.embeddings.factory import create_provider
from app.embeddings.provider import EmbeddingError, InputRejected, Vector
from app.embeddings.queue import Priority
from app.embeddings.rerank import CrossEncoder, reranker
from app.errors import EngramError
from app.ids import SYSTEM
from app.observability import metrics
from app.observability.context import deadline
from app.store import index, vectors
from app.store.cell import Cell, each_cell
from app.store.database import Database, Tenant
from app.store.errors import DATABASE_ERRORS
from app.store.vectors import Doc, ModelRefused

logger = logging.getLogger(__name__)

_POLL_SECONDS = 30.0  # how often the filler looks for other replicas' pending texts
_RECHECK_SECONDS = 5.0  # after a model change, how often searches look whether a reindex finished
_REBUILD_PAGE = 500  # entities per transaction when `engram reindex` rebuilds documents

Progress = Callable[[Tenant, int, int], None]


@dataclass(frozen=True, slots=True)
class ReindexReport:
    tenants: int
    texts: int
    complete: bool  # every tenant's texts now carry the model's vectors
    current: bool  # ... and the model was made current


class _Turn(NamedTuple):
    """A tenant's filling so far: its texts after id `after` are still to embed (`replacing`: those
    not of that model, else those with no vector), `done` embedded; `generation` the pending
    marker's when it began."""

    tenant: Tenant
    replacing: index.Model | None
    generation: int | None
    after: int = 0
    done: int = 0


class Indexer:
    def __init__(
        self,
        db: Database,
        embedder: Embedder | None,
        *,
        batch_size: int,
        sync_texts: int = 128,
        write_budget_seconds: float = 0.05,
        reranker: CrossEncoder | None = None,
        rerank_depth: int = 20,
    ) -> None:
        self._db = db
        self.embedder = embedder
        self.reranker = reranker  # recall's second reading of its first `rerank_depth` facts (off: None)
        self.rerank_depth = rerank_depth
        self._batch = batch_size
        self._sync_texts = sync_texts  # texts a write embeds before its transaction; the filler does the rest
        self._write_budget = write_budget_seconds  # ... and how long it waits for them
        self.model: index.Model | None = None
        self.current_model: str | None = None  # the model whose vectors are complete
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._checked = 0.0
        self._adopted: set[str] = {MAIN_CELL}  # cells whose database has this server's model (same id)

    @classmethod
    def from_settings(cls, db: Database, settings: Settings) -> Indexer:
        provider = create_provider(settings)
        embedder = None
        if provider is not None:
            embedder = Embedder(
                provider,
                settings.embedding_cache_size,
                workers=settings.embedding_workers,
                queue_texts=settings.embedding_queue_texts,
            )
        return cls(
            db,
            embedder,
            batch_size=settings.embedding_batch_size,
            sync_texts=settings.embed_sync_texts,
            write_budget_seconds=settings.embed_write_budget_ms / 1000,
            reranker=reranker(settings.rerank_model, settings.embedding_threads, settings.rerank_budget_ms),
            rerank_depth=settings.rerank_depth,
        )

    # --- life cycle ---------------------------------------------------------------------------

    def forget(self, tenant_id: str) -> None:
        """This server's cached vectors of the tenant's texts, dropped (after a purge)."""
        if self.embedder is not None:
            self.embedder.forget(tenant_id)

    async def start(self, *, fill: bool = True) -> None:
        """Load the model, register it, and (in a server) start the filler. Model errors are fatal."""
        if self.embedder is not None:
            await self.embedder.provider.start()
        if self.reranker is not None:
            await self.reranker.start()
        try:
            await self.register()
        except ModelRefused as exc:
            raise EmbeddingError(str(exc)) from exc
        except DATABASE_ERRORS as exc:
            logger.warning("embedding model not registered yet (%s); will retry", type(exc).__name__)
        if fill and self.embedder is not None:
            self._task = asyncio.create_task(self._fill_forever(), name="embedding filler")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self.embedder is not None:
            await self.embedder.close()
            await self.embedder.provider.close()
        if self.reranker is not None:
            await self.reranker.close()

    async def register(self) -> None:
        """Record this server's model; warn when the stored vectors were made by another one."""
        if self.embedder is None:
            self.current_model = await vectors.current_model_name(self._db.control)
            return
        self.model, self.current_model = await vectors.register_model(
            self._db.control, self.embedder.model, self.embedder.dimensions
        )

        async def copy_model(name: str, cell: Cell) -> None:
            await self._adopt(name)

        await each_cell(self._db.cells, copy_model, on_error="skip")  # a cell skipped gets it when next used
        if self.model_changed:
            logger.warning(
                "embedding model changed: stored vectors were made by %s, this server embeds with %s. "
                "Semantic search covers only texts embedded by the new model until `engram reindex` runs.",
                self.current_model,
                self.model.name,
            )

    def state(self) -> str:
        """The embedding provider's state, as server_status and /readyz report it."""
        if self.embedder is None:
            return "off (keyword search only)"
        if self.model is None:
            return "not ready (model not registered yet)"
        changed = f"; vectors of {self.current_model} await `engram reindex`" if self.model_changed else ""
        return f"ok ({self.model.name}, {self.model.dimensions} dimensions{changed})"

    @property
    def model_changed(self) -> bool:
        return self.model is not None and self.current_model is not None and self.current_model != self.model.name

    async def still_changed(self) -> bool:
        """`model_changed`, read again from the database at most every few seconds (a reindex
        elsewhere may have finished)."""
        if self.model_changed and time.monotonic() - self._checked > _RECHECK_SECONDS:
            self._checked = time.monotonic()
            self.current_model = await vectors.current_model_name(self._db.control)
        return self.model_changed

    # --- writes and queries ---------------------------------------------------------------------

    async def vectors_for(self, tenant: Tenant, texts: Sequence[str]) -> index.Vectors:
        """Embed a write's texts before its transaction opens: at most ENGRAM_EMBED_SYNC_TEXTS of them,
        and only what the embedding pool does within ENGRAM_EMBED_WRITE_BUDGET_MS, at write priority
        (no caller waits in line behind another's bulk work). Never fails: what is not embedded now is
        left pending for the filler, which the commit wakes."""
        unique = list(dict.fromkeys(texts))[: self._sync_texts]
        if self.embedder is None or self.model is None or not unique:
            return index.Vectors(self.model)
        if tenant.cell not in self._adopted:
            await self._adopt(tenant.cell)
        found = await self.embedder.embed_within(unique, scope=tenant.id, seconds=self._write_budget)
        metrics.EMBED_DEFERRED.inc(len(set(texts)) - len(found))
        return index.Vectors(self.model, {index.text_hash(t): v for t, v in found.items()})

    def written(self, pending: int) -> None:
        """After a commit that left `pending` texts without vectors: wake the filler."""
        if pending:
            self._wake.set()

    async def query_vector(self, tenant: Tenant, text: str) -> tuple[Vector | None, str | None]:
        """The query's vector, or None and why not."""
        if self.embedder is None:
            return None, "semantic search is switched off on this server (ENGRAM_EMBEDDING_PROVIDER=none)"
        if self.model is None:
            return None, "semantic search is not ready: the embedding model is not registered yet"
        try:
            return (await self.embedder.embed([text], scope=tenant.id, attempts=1, priority=Priority.QUERY))[0], None
        except EmbeddingError:
            return None, "semantic ranking skipped: the embedding provider is not answering"

    async def _adopt(self, cell: str) -> None:
        """Copy this server's model to `cell`'s database (its tenants' vectors name it by id)."""
        if self.model is not None and cell not in self._adopted:
            await vectors.adopt_model(self._db.on(cell), self.model, self.current_model == self.model.name)
            self._adopted.add(cell)

    async def _tenants(self, *, pending_only: bool, every_cell: bool = False) -> list[Tenant]:
        """The tenants of every cell this server reaches. The control database's failure stops the
        walk; another cell's too with `every_cell`, else that cell is skipped (and logged)."""

        async def listed(name: str, cell: Cell) -> list[Tenant]:
            await self._adopt(name)
            return await vectors.tenants(cell.pool, pending_only=pending_only)

        found = await listed(MAIN_CELL, self._db.cells[MAIN_CELL])
        others = {name: cell for name, cell in self._db.cells.items() if name != MAIN_CELL}
        walked = await each_cell(others, listed, on_error="raise" if every_cell else "skip")
        return found + [tenant for tenants in walked.values() for tenant in tenants]

    # --- filling ------------------------------------------------------------------------------

    async def fill(
        self,
        tenant: Tenant,
        *,
        replace: bool = False,
        max_texts: int | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """Embed the tenant's pending texts (or, with `replace`, every text not embedded by this
        server's model), batch by batch, each batch in its own short transaction. Returns how many
        texts got vectors; resumable at any point, since finished rows no longer qualify."""
        turn: _Turn | None = await self._first_turn(tenant, replace=replace)
        done = 0
        while turn is not None:
            if max_texts is not None and done >= max_texts:
                return done  # stopped early: the marker stays
            size = self._batch if max_texts is None else min(self._batch, max_texts - done)
            turn = await self._next_batch(turn, size)
            if turn is not None:
                done = turn.done
                if progress is not None:
                    progress(done)
        return done

    async def _fill_in_turns(self) -> None:
        """Every tenant with pending texts gets a batch in turn, round after round, until none has
        any; the tenants are listed again at each round, so a tenant with a large backlog (an
        import, a model change) keeps no other's fresh write waiting for its vectors. A tenant
        leaves the rounds when it has no text left (its pending marker is cleared then)."""
        turns: dict[str, _Turn] = {}
        while True:
            for tenant in await self._tenants(pending_only=True):
                if tenant.id not in turns:
                    turns[tenant.id] = await self._first_turn(tenant)
            if not turns:
                return
            for key, turn in list(turns.items()):
                if (after := await self._next_batch(turn, self._batch)) is None:
                    del turns[key]
                else:
                    turns[key] = after

    async def _first_turn(self, tenant: Tenant, *, replace: bool = False) -> _Turn:
        """Where a tenant's filling starts: before its first text, with its pending marker's
        generation (cleared at the end only if no write set a newer one meanwhile)."""
        assert self.embedder is not None and self.model is not None
        generation = None
        if not replace:
            async with self._db.transaction(tenant, readonly=True, viewer=SYSTEM) as tx:
                generation = await vectors.pending_generation(tx)
        return _Turn(tenant, self.model if replace else None, generation)

    async def _next_batch(self, turn: _Turn, size: int) -> _Turn | None:
        """One batch of the tenant's texts embedded after `turn`'s last: the turn after it, or None
        when none was left (its pending marker cleared then)."""
        assert self.model is not None
        async with self._db.transaction(turn.tenant, readonly=True, viewer=SYSTEM) as tx:
            docs = await vectors.docs_to_embed(tx, turn.replacing, turn.after, size)
        if not docs:
            if turn.generation is not None:
                async with self._db.transaction(turn.tenant, viewer=SYSTEM) as tx:
                    await vectors.clear_pending(tx, turn.generation)
            return None
        embedded = await self._embed_docs(turn.tenant, docs)
        async with self._db.transaction(turn.tenant, viewer=SYSTEM) as tx:
            await vectors.store_vectors(tx, self.model, [(d.id, d.body_hash, v) for d, v in embedded])
        return turn._replace(after=docs[-1].id, done=turn.done + len(docs))

    async def _embed_docs(self, tenant: Tenant, docs: Sequence[Doc]) -> list[tuple[Doc, Vector]]:
        """Vectors for a batch of documents. When the provider refuses the batch's texts, they are
        tried one by one and those it refuses alone are skipped (they stay found by words), so one
        bad text cannot stall the filler."""
        assert self.embedder is not None
        try:
            found = await self.embedder.embed([d.body for d in docs], scope=tenant.id, priority=Priority.FILL)
            return list(zip(docs, found, strict=True))
        except InputRejected:
            if len(docs) == 1:
                logger.warning("embedding provider refused a text of tenant %s; it stays unembedded", tenant.key)
                return []
        out = []
        for doc in docs:
            out += await self._embed_docs(tenant, [doc])
        return out

    async def _fill_forever(self) -> None:
        """Fill pending texts when a write leaves some, every 30 s, and after the provider recovers."""
        assert self.embedder is not None
        while True:
            wait = _POLL_SECONDS
            try:
                if self.model is None:
                    await self.register()
                else:
                    self.current_model = await vectors.current_model_name(self._db.control)
                await self._fill_in_turns()
                metrics.EMBED_PENDING.set(0)
            except ProviderDown:
                wait = max(self.embedder.seconds_until_retry(), 0.5)
            except EmbeddingError as exc:
                logger.warning("filling embeddings paused: %s", exc)
                wait = max(self.embedder.seconds_until_retry(), 0.5)
            except DATABASE_ERRORS as exc:
                logger.warning("filling embeddings paused: database error %s", type(exc).__name__)
                wait = 5.0
            except Exception:
                logger.exception("filling embeddings failed")
            if wait != _POLL_SECONDS:  # paused with work left: show the backlog to the alerts
                with contextlib.suppress(Exception):
                    metrics.EMBED_PENDING.set(await self._backlog())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=wait)
            self._wake.clear()

    async def _backlog(self) -> int:
        """Texts waiting for an embedding, over all tenants that have some."""
        total = 0
        for tenant in await self._tenants(pending_only=True):
            async with self._db.transaction(tenant, readonly=True, viewer=SYSTEM) as tx:
                total += await vectors.count_to_embed(tx, self.model)
        return total

    # --- engram reindex -----------------------------------------------------------------------

    async def reindex(
        self, tenant_keys: Sequence[str] = (), *, max_texts: int | None = None, progress: Progress | None = None
    ) -> ReindexReport:
        """Rebuild every tenant's search documents and give each text a vector of this server's
        model, tenant by tenant; once all are done, make the model current."""
        if self.embedder is None or self.model is None:
            raise EngramError("unavailable", "reindex needs an embedding provider (ENGRAM_EMBEDDING_PROVIDER)")
        every = await self._tenants(pending_only=False, every_cell=True)
        chosen = [t for t in every if not tenant_keys or t.key in tenant_keys]
        if missing := set(tenant_keys) - {t.key for t in chosen}:
            raise EngramError("not_found", f"no such tenant: {', '.join(sorted(missing))}")
        budget = max_texts
        texts = 0
        for n, tenant in enumerate(chosen):
            await self._rebuild_documents(tenant)
            async with self._db.transaction(tenant, readonly=True, viewer=SYSTEM) as tx:
                total = await vectors.count_to_embed(tx, self.model)
            if progress is not None:
                progress(tenant, 0, total)
            done = await self.fill(
                tenant,
                replace=True,
                max_texts=budget,
                progress=None if progress is None else functools.partial(_tenant_progress, progress, tenant, total),
            )
            texts += done
            if done < total:
                return ReindexReport(n, texts, complete=False, current=False)
            with deadline(math.inf):  # minutes for a large tenant, by design
                async with self._db.transaction(tenant, viewer=SYSTEM) as tx:
                    await vectors.build_vector_index(tx, self.model)
            if budget is not None:
                budget -= done
        current = not tenant_keys
        if current:
            model = self.model

            async def make_current(name: str, cell: Cell) -> None:  # each cell's copy, under the same id
                await vectors.make_current(cell.pool, model)

            await each_cell(self._db.cells, make_current, on_error="raise")
            self.current_model = self.model.name
        return ReindexReport(len(chosen), texts, complete=True, current=current)

    async def _rebuild_documents(self, tenant: Tenant) -> None:
        """Documents for every entity, relation and episode, as the write path would have made them
        (fixes missing ones)."""
        after: str | None = None
        while True:
            async with self._db.transaction(tenant, viewer=SYSTEM) as tx:
                ids = await vectors.entity_ids_after(tx, after, _REBUILD_PAGE)
                if not ids:
                    break
                await index.sync(tx, index.Vectors(self.model), entities=ids, relations_of_entities=True)
            after = ids[-1]
        last: int | None = None
        while True:
            async with self._db.transaction(tenant, viewer=SYSTEM) as tx:
                episode_ids = await vectors.episode_ids_after(tx, last, _REBUILD_PAGE)
                if not episode_ids:
                    return
                await index.sync(tx, index.Vectors(self.model), episodes=episode_ids)
            last = episode_ids[-1]


def _tenant_progress(progress: Progress, tenant: Tenant, total: int, done: int) -> None:
    progress(tenant, done, total)
