"""The embedding pool: queries ahead of bulk work, writes that wait for their vectors only within
their budget, the pool's bound, its metrics, and the promise of docs/search.md ("When a fresh text
is found by meaning") end to end: the real model, server, client and database."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx2
import pytest
from pydantic import ValidationError

from app.config import Settings
from app.embeddings.embedder import Embedder
from app.embeddings.queue import Priority
from tests.support.client import ok
from tests.support.search import eventually, names, search
from tests.support.server import serve

BULK = [f"background text number {i} about cedar groves and harbor lights" for i in range(64)]


async def test_a_query_goes_ahead_of_bulk_work(local_model):
    """One worker, 64 texts of the filler queued (8 jobs): the query is answered while most of them
    still wait, not after all of them."""
    embedder = Embedder(local_model, cache_size=0, workers=1)
    try:
        bulk = asyncio.create_task(embedder.embed(BULK, scope="t", priority=Priority.FILL))
        await asyncio.sleep(0)  # the bulk jobs are queued
        assert embedder.pool.waiting(Priority.FILL) >= len(BULK) - local_model.job_texts
        (vector,) = await embedder.embed(["which groves?"], scope="t", priority=Priority.QUERY)
        assert len(vector) == local_model.dimensions
        assert not bulk.done() and embedder.pool.waiting(Priority.FILL) >= len(BULK) - 3 * local_model.job_texts
        assert len(await bulk) == len(BULK)
        assert embedder.pool.waiting(Priority.FILL) == 0
    finally:
        await embedder.close()


async def test_a_write_takes_what_its_budget_allows(local_model):
    embedder = Embedder(local_model, cache_size=1000, workers=1)
    try:
        texts = [f"fact {i} of a budgeted write" for i in range(40)]
        assert await embedder.embed_within(texts, scope="t", seconds=0) == {}
        await asyncio.sleep(0)  # the dropped jobs' callbacks
        assert embedder.pool.waiting(Priority.WRITE) == 0  # jobs not started are dropped, not left queued
        everything = await embedder.embed_within(texts, scope="t", seconds=600)
        assert set(everything) == set(texts)
        assert everything[texts[3]] == (await embedder.embed([texts[3]], scope="t"))[0]  # cached, the same vector
        assert set(await embedder.embed_within(texts, scope="t", seconds=0)) == set(texts)  # the cache needs no budget
    finally:
        await embedder.close()


async def test_a_full_pool_leaves_write_texts_pending(local_model):
    embedder = Embedder(local_model, cache_size=0, workers=1, queue_texts=16)
    try:
        assert await embedder.embed_within([f"too many {i}" for i in range(17)], scope="t", seconds=600) == {}
        await asyncio.sleep(0)
        assert embedder.pool.waiting(Priority.WRITE) == 0
        fits = [f"fits {i}" for i in range(16)]
        assert set(await embedder.embed_within(fits, scope="t", seconds=600)) == set(fits)
        # Queries and the filler are not refused: one text each, and one batch at a time.
        assert len(await embedder.embed([f"bulk {i}" for i in range(40)], scope="t", priority=Priority.FILL)) == 40
    finally:
        await embedder.close()


@pytest.mark.parametrize(
    "field, value",
    [
        ("embedding_workers", 0),
        ("embedding_workers", 65),
        ("embedding_queue_texts", -1),
        ("embedding_queue_texts", 1_000_001),
        ("embed_write_budget_ms", -1),
        ("embed_write_budget_ms", 10_001),
    ],
)
def test_pool_settings_are_bounded(field: str, value: int) -> None:
    with pytest.raises(ValidationError):
        Settings(**{field: value})


def metric(text: str, name: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(name)]


async def test_a_fresh_write_is_found_by_words_at_once_and_by_meaning_once_filled(db_settings, tenant):
    """With no budget at all, every text of a write is left to the filler: the write reports them,
    words find them at once, and meaning finds them once the filler has run (which the commit woke)."""
    with serve(db_settings, ENGRAM_EMBED_WRITE_BUDGET_MS="0") as server:
        async with server.client(tenant) as c:
            entity = {"name": "Harbor Lights", "type": "project", "observations": ["a lighthouse restoration plan"]}
            up = ok(await c.call_tool("upsert_entities", {"entities": [entity]}))
            assert up["embeddings_pending"] == 2  # the entity's own text and its observation
            assert names(await search(c, "lighthouse", mode="keyword")) == ["Harbor Lights"]
            hybrid = await search(c, "lighthouse")
            assert names(hybrid) == ["Harbor Lights"] or any("embedding" in n for n in hybrid["notices"])

            async def found_by_meaning() -> Any:
                return names(await search(c, "fixing up an old beacon tower by the sea", mode="semantic"))

            assert (await eventually(found_by_meaning))[0] == "Harbor Lights"
        scraped = httpx2.get(f"http://127.0.0.1:{server.env['ENGRAM_METRICS_PORT']}/metrics", timeout=5).text
    # The write's job may have started before its budget ran out (its vectors then wait in the cache
    # for the filler): which priorities waited depends on timing, that the pool reports them does not.
    assert metric(scraped, 'engram_embedding_queue_wait_seconds_count{priority="query"}')
    assert metric(scraped, 'engram_embedding_queue_texts{priority="write"} 0.0')
    assert metric(scraped, "engram_embedding_deferred_texts_total 2.0")


async def test_a_write_within_its_budget_is_found_by_meaning_at_once(client_for, tenant):
    """The suite's servers give writes a budget no test machine exhausts: the texts are embedded
    before the commit, so meaning finds them as soon as the write returns."""
    async with client_for(tenant) as c:
        entity = {"name": "Quiet Orchard", "type": "place", "observations": ["apple trees planted by my grandfather"]}
        assert ok(await c.call_tool("upsert_entities", {"entities": [entity]}))["embeddings_pending"] == 0
        assert names(await search(c, "fruit trees from my family", mode="semantic"))[0] == "Quiet Orchard"


async def test_a_tenant_with_a_backlog_keeps_no_other_waiting(db_settings):
    """The filler gives each tenant with pending texts a batch in turn: a fresh write of one tenant
    is embedded while another's backlog of 1,200 texts (19 batches) still waits."""
    big, small = (f"fill-{n}-{uuid.uuid4().hex[:8]}" for n in ("big", "small"))
    with serve(db_settings, ENGRAM_EMBED_WRITE_BUDGET_MS="0", ENGRAM_EMBEDDING_BATCH_SIZE="64") as server:
        async with server.client(big) as c:
            for part in range(12):
                texts = [f"note {part}-{i} on the quarterly ledger of warehouse {i}" for i in range(99)]
                ok(
                    await c.call_tool(
                        "upsert_entities",
                        {"entities": [{"name": f"Ledger {part}", "type": "t", "observations": texts}]},
                    )
                )
        async with server.client(small) as c:
            entity = {"name": "Harbor Lights", "type": "project", "observations": ["a lighthouse restoration plan"]}
            ok(await c.call_tool("upsert_entities", {"entities": [entity]}))

            async def found_by_meaning() -> Any:
                return names(await search(c, "fixing up an old beacon tower by the sea", mode="semantic"))

            assert (await eventually(found_by_meaning))[0] == "Harbor Lights"
        async with server.client(big) as c:
            notices = (await search(c, "ledger", mode="keyword"))["notices"]
            hybrid = (await search(c, "quarterly ledger"))["notices"]
        assert any("no embedding yet" in n for n in [*notices, *hybrid]), "the backlog was done first"
