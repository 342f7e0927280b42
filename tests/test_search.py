"""The `search` tool end to end: the real server, client, database and local model."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from mcp.shared.exceptions import MCPError

from app.config import Settings
from tests.support.client import connect, error_code, ok
from tests.support.search import eventually, names, reindex, search
from tests.support.server import Server, free_port, scratch_database, server_env, start_server

RELEVANCE = json.loads((Path(__file__).parent / "data" / "relevance.json").read_text())


TEAM = [
    {
        "name": "Billing Service",
        "type": "service",
        "description": "Creates invoices and charges customers' cards",
        "area": "engineering",
        "topic": "payments",
        "certainty": 95,
        "observations": ["deployed on Kubernetes in two regions", "owned by the payments team"],
    },
    {
        "name": "Priya Raman",
        "type": "person",
        "description": "Engineering manager",
        "area": "engineering",
        "topic": "people",
        "certainty": 80,
        "observations": ["holds one-on-ones every other Thursday", "wants the migration plan before planning"],
    },
    {
        "name": "Peanut Allergy",
        "type": "health",
        "area": "family",
        "certainty": 100,
        "observations": ["Liam reacts badly to peanuts and tree nuts", "carry the auto-injector everywhere"],
    },
    {
        "name": "Kyoto Trip",
        "type": "trip",
        "area": "family",
        "topic": "travel",
        "certainty": 60,
        "observations": ["flights booked for April 2 to April 12", "wants to see the cherry blossoms"],
    },
]


async def test_three_modes(client_for, tenant):
    async with client_for(tenant) as c:
        up = ok(await c.call_tool("upsert_entities", {"entities": TEAM}))
        assert up["embeddings_pending"] == 0

        hybrid = await search(c, "which foods are dangerous for my son?")
        assert hybrid["mode"] == "hybrid" and names(hybrid)[0] == "Peanut Allergy"
        top = hybrid["hits"][0]
        assert {k: top["match"][k] for k in ("kind", "text", "snippet", "source", "valid_until")} == {
            "kind": "observation",
            "text": "Liam reacts badly to peanuts and tree nuts",
            "snippet": None,
            "source": "engram-cli",  # the observation's record: by default, the writer's client id
            "valid_until": None,
        }
        assert top["scores"]["semantic"] > 0.3 and 0 < top["scores"]["fused"] <= 1
        assert top["entity"]["area"] == "family" and top["entity"]["certainty"] == 100

        semantic = await search(c, "who runs my one-on-one meetings", mode="semantic")
        assert semantic["mode"] == "semantic" and names(semantic)[0] == "Priya Raman"
        assert semantic["hits"][0]["scores"]["keyword"] is None

        keyword = await search(c, "cherry blossoms", mode="keyword")
        assert names(keyword) == ["Kyoto Trip"]
        hit = keyword["hits"][0]
        assert hit["match"]["snippet"] == "wants to see the **cherry** **blossoms**"
        assert hit["scores"]["keyword"] == 1.0 and hit["scores"]["semantic"] is None

        typo = await search(c, "Pryia Raman", mode="keyword")  # trigram similarity of names
        assert names(typo)[0] == "Priya Raman" and typo["hits"][0]["scores"]["name"] >= 0.5

        phrase = await search(c, '"tree nuts" -kubernetes', mode="keyword")  # web-search syntax
        assert names(phrase) == ["Peanut Allergy"]
        assert (await search(c, '"nuts tree"', mode="keyword"))["hits"] == []


async def test_found_by_any_one_of_hundreds_of_observations(client_for, tenant):
    facts = [f"inventory item {i}: box {i} holds spare cables and adapters" for i in range(199)]
    facts.insert(150, "the sailing boat is moored at the north harbour in winter")
    async with client_for(tenant) as c:
        for start in (0, 100):
            batch = {"name": "Storage Unit", "type": "place", "observations": facts[start : start + 100]}
            ok(await c.call_tool("upsert_entities", {"entities": [batch]}))
        ok(await c.call_tool("upsert_entities", {"entities": TEAM}))
        found = await search(c, "where is the yacht kept during the cold months?")
        assert names(found)[0] == "Storage Unit"
        assert found["hits"][0]["match"]["text"] == "the sailing boat is moored at the north harbour in winter"
        assert names(found).count("Storage Unit") == 1  # one hit per entity, at its best text


async def test_filters_min_score_and_paging(client_for, tenant):
    async with client_for(tenant) as c:
        ok(await c.call_tool("upsert_entities", {"entities": TEAM}))
        query = "plans and people"
        assert set(names(await search(c, query, types=["PERSON", "trip"]))) == {"Priya Raman", "Kyoto Trip"}
        assert set(names(await search(c, query, area="Family"))) == {"Peanut Allergy", "Kyoto Trip"}
        assert names(await search(c, query, topic="payments")) == ["Billing Service"]
        assert set(names(await search(c, query, min_certainty=80, max_certainty=95))) == {
            "Billing Service",
            "Priya Raman",
        }
        strong = await search(c, "peanut allergy", min_score=0.6)
        assert names(strong) == ["Peanut Allergy"]
        assert all(max(v for v in h["scores"].values() if v is not None) >= 0.6 for h in strong["hits"])

        whole = await search(c, query, limit=4)
        assert len(whole["hits"]) == 4 and whole["next_cursor"] is None
        first = await search(c, query, limit=3)
        assert first["next_cursor"]
        second = await search(c, query, limit=3, cursor=first["next_cursor"])
        assert names(first) + names(second) == names(whole) and second["next_cursor"] is None

        other = await c.call_tool("search", {"query": "another query", "cursor": first["next_cursor"]})
        assert error_code(other) == "invalid"
        bogus = await c.call_tool("search", {"query": query, "cursor": "not-a-cursor"})
        assert error_code(bogus) == "invalid"
    async with client_for(tenant + "-other") as b:  # a cursor is signed for its tenant: useless to another
        moved = await b.call_tool("search", {"query": query, "limit": 3, "cursor": first["next_cursor"]})
        assert error_code(moved) == "invalid"


@pytest.mark.parametrize(
    "args",
    [
        {"query": ""},
        {"query": "   "},
        {"query": "x" * 1001},
        {"query": "x", "mode": "fuzzy"},
        {"query": "x", "limit": 0},
        {"query": "x", "limit": 51},
        {"query": "x", "min_score": 1.5},
        {"query": "x", "min_certainty": 101},
        {"query": "x", "min_certainty": 90, "max_certainty": 10},
        {"query": "x", "types": ["t"] * 21},
        {"query": "x", "cursor": "c" * 201},
    ],
)
async def test_bad_arguments_are_refused(client_for, tenant, args):
    async with client_for(tenant) as c:
        result = await c.call_tool("search", args)
    assert result.is_error


async def test_search_needs_read_scope(client_for, tenant):
    async with client_for(tenant, scopes=("memory:write",)) as c:
        with pytest.raises(MCPError):  # 403 insufficient_scope at the HTTP layer (tests/test_auth.py)
            await c.call_tool("search", {"query": "anything"})


async def test_tenants_never_see_each_other(client_for, tenant):
    async with client_for(tenant) as a:
        ok(await a.call_tool("upsert_entities", {"entities": TEAM}))
    async with client_for(tenant + "-other") as b:
        ok(await b.call_tool("upsert_entities", {"entities": [{"name": "Garden", "type": "hobby"}]}))
        for mode in ("hybrid", "semantic", "keyword"):
            for query in ("peanut allergy", "Priya Raman", "Billing", "cherry blossoms in Kyoto"):
                assert set(names(await search(b, query, mode=mode))) <= {"Garden"}, (mode, query)


async def tenant_schema(db_settings: Settings, tenant: str) -> tuple[asyncpg.Connection, str]:
    conn = await asyncpg.connect(db_settings.admin_dsn())
    schema = await conn.fetchval("SELECT schema_name FROM engram.tenants WHERE key = $1", tenant)
    assert re.fullmatch(r"t_[0-9a-f]{32}", schema)
    return conn, schema


async def test_deleted_entities_never_appear(client_for, tenant, db_settings):
    async with client_for(tenant) as c:
        ok(await c.call_tool("upsert_entities", {"entities": TEAM}))
        assert "Peanut Allergy" in names(await search(c, "peanut allergy"))
        conn, schema = await tenant_schema(db_settings, tenant)
        try:
            await conn.execute(f"UPDATE {schema}.entities SET deleted_at = now() WHERE name = 'Peanut Allergy'")
        finally:
            await conn.close()
        for mode in ("hybrid", "semantic", "keyword"):
            assert "Peanut Allergy" not in names(await search(c, "peanut allergy nuts", mode=mode, limit=50))


async def test_changed_texts_are_indexed_again(client_for, tenant, db_settings):
    async with client_for(tenant) as c:
        ok(await c.call_tool("upsert_entities", {"entities": [{"name": "Atlas", "type": "project"}]}))
        ok(
            await c.call_tool(
                "upsert_entities",
                {"entities": [{"name": "Atlas", "type": "project", "description": "warehouse migration to Postgres"}]},
            )
        )
        assert names(await search(c, "moving analytics data to a new database", mode="semantic"))[0] == "Atlas"
        ok(
            await c.call_tool(
                "upsert_entities",
                {"entities": [{"name": "Atlas", "type": "project", "description": "marketing site redesign"}]},
            )
        )
        assert (await search(c, "warehouse", mode="keyword"))["hits"] == []
        assert names(await search(c, "marketing redesign", mode="keyword")) == ["Atlas"]
    conn, schema = await tenant_schema(db_settings, tenant)
    try:
        rows = await conn.fetch(f"SELECT body, model_id IS NOT NULL AS embedded FROM {schema}.search_docs")
    finally:
        await conn.close()
    assert [(r["body"], r["embedded"]) for r in rows] == [("Atlas (project): marketing site redesign", True)]


RELEVANCE_TEXTS = sum(1 + len(e.get("observations", [])) for e in RELEVANCE["entities"])


def reciprocal_rank(found: list[str], expected: list[str]) -> float:
    return next((1 / rank for rank, name in enumerate(found[:10], start=1) if name in expected), 0.0)


async def test_relevance_hybrid_beats_keyword_and_semantic(db_settings, client_for, tenant):
    """MRR@10 over the relevance set (tests/data/relevance.json). Measured with all-MiniLM-L6-v2:
    hybrid 0.941, semantic 0.897, keyword 0.755 (docs/benchmarks.md)."""
    async with client_for(tenant) as c:
        up = ok(await c.call_tool("upsert_entities", {"entities": RELEVANCE["entities"]}))
        # One call embeds ENGRAM_EMBED_SYNC_TEXTS texts itself; the background filler does the rest.
        assert up["embeddings_pending"] == max(0, RELEVANCE_TEXTS - 128)
        conn, schema = await tenant_schema(db_settings, tenant)
        try:

            async def all_embedded() -> bool:
                return not await conn.fetchval(f"SELECT count(*) FROM {schema}.search_docs WHERE model_id IS NULL")

            await eventually(all_embedded)
        finally:
            await conn.close()
        mrr = {}
        for mode in ("keyword", "semantic", "hybrid"):
            ranks = [
                reciprocal_rank(names(await search(c, q["query"], mode=mode)), q["expected"])
                for q in RELEVANCE["queries"]
            ]
            mrr[mode] = sum(ranks) / len(ranks)
    assert len(RELEVANCE["entities"]) >= 60 and len(RELEVANCE["queries"]) >= 40
    assert mrr["hybrid"] > mrr["semantic"] and mrr["hybrid"] > mrr["keyword"], mrr
    assert mrr["hybrid"] >= 0.92 and mrr["semantic"] >= 0.87 and mrr["keyword"] >= 0.72, mrr


# --- servers of their own: embedding provider down, model change and reindex --------------------------


@pytest.fixture
async def scratch(db_settings: Settings) -> AsyncIterator[tuple[str, str]]:
    """A freshly migrated database of its own, so model changes touch no other test: (app URL, owner URL)."""
    async with scratch_database(db_settings, "search") as urls:
        yield urls


@contextmanager
def serve(db_settings: Settings, urls: tuple[str, str], **extra: str) -> Iterator[Server]:
    port = free_port()
    env = server_env(db_settings, port, ENGRAM_DATABASE_URL=urls[0], ENGRAM_ADMIN_DATABASE_URL=urls[1], **extra)
    process = start_server(env)
    try:
        settings = db_settings.model_copy(update={"port": port})
        yield Server(f"http://127.0.0.1:{port}/mcp", f"http://127.0.0.1:{port}", settings, env, process)
    finally:
        process.terminate()
        process.wait(timeout=30)


def client(server: Server, tenant: str) -> Any:
    return connect(server.url, server.token(tenant))


async def test_provider_down_writes_succeed_and_fill_later(db_settings, scratch, embedding_server):
    extra = {
        "ENGRAM_EMBEDDING_PROVIDER": "openai",
        "ENGRAM_EMBEDDING_MODEL": "all-MiniLM-L6-v2",
        "ENGRAM_EMBEDDING_DIMENSIONS": "384",
        "ENGRAM_EMBEDDING_BASE_URL": embedding_server.url,
        "ENGRAM_EMBEDDING_MAX_RETRIES": "0",
    }
    with serve(db_settings, scratch, **extra) as server:
        async with client(server, "acme") as c:
            up = ok(await c.call_tool("upsert_entities", {"entities": TEAM[:2]}))
            assert up["embeddings_pending"] == 0

            embedding_server.down = True
            up = ok(await c.call_tool("upsert_entities", {"entities": TEAM[2:]}))
            assert [r["status"] for r in up["results"]] == ["created", "created"]
            assert up["embeddings_pending"] == 6  # two entities + four observations, saved all the same

            found = await search(c, "peanuts")
            assert found["mode"] == "keyword" and names(found)[0] == "Peanut Allergy"
            assert any("not answering" in n for n in found["notices"])
            semantic = await c.call_tool("search", {"query": "peanuts", "mode": "semantic"})
            assert error_code(semantic) == "unavailable"

            embedding_server.down = False

            async def filled() -> dict[str, Any] | None:
                args = {"query": "which foods are dangerous for my son?", "mode": "semantic"}
                result = await c.call_tool("search", args)  # `unavailable` until the server tries the provider again
                content = result.structured_content
                if result.is_error or not content["hits"] or content["notices"]:
                    return None
                # The filler commits batch by batch; wait for the answer a complete index gives.
                return content if names(content)[0] == "Peanut Allergy" else None

            result = await eventually(filled)
            assert names(result)[0] == "Peanut Allergy"
    owner = await asyncpg.connect(scratch[1])
    try:
        assert await owner.fetchval("SELECT count(*) FROM engram.search_tenants(true, NULL, NULL, 1000)") == 0
    finally:
        await owner.close()


async def test_model_change_is_detected_and_reindex_resumes(db_settings, scratch):
    from app.embeddings.local import BUNDLED

    question = "which foods are dangerous for my son?"
    with serve(db_settings, scratch) as first:
        for tenant, entities in (("home", TEAM[2:]), ("work", TEAM[:2])):
            async with client(first, tenant) as c:
                ok(await c.call_tool("upsert_entities", {"entities": entities}))

    # The same weights under another name: a different model as far as stored vectors go.
    other_model = str(BUNDLED)
    with serve(db_settings, scratch, ENGRAM_EMBEDDING_MODEL=other_model) as second:
        async with client(second, "home") as c:
            changed = await search(c, question)
            assert any("embedding model changed" in n for n in changed["notices"])
            assert (await search(c, question, mode="semantic"))["hits"] == []  # no vectors of this model yet

            partial = reindex(second, "--max-texts", "5")
            assert partial.returncode == 0, partial.stderr
            assert "stopped after 5 texts" in partial.stdout
            assert len((await search(c, "peanuts nuts blossoms flights", mode="semantic"))["hits"]) >= 1

            done = reindex(second)
            assert done.returncode == 0, done.stderr
            assert "2 tenant(s)" in done.stdout and "now the current model" in done.stdout
            # Resumed: the first run embedded 5 of home's 6 texts, so this one embeds home's last and
            # work's 6; with no terminal it draws no progress (tests/test_progress.py draws it).
            assert "2 tenant(s), 7 texts embedded" in done.stdout, done.stdout
            assert "|" not in done.stderr, done.stderr  # no bar (a bar is drawn between bars: |###|)

            assert names(await search(c, question, mode="semantic"))[0] == "Peanut Allergy"

            async def settled() -> bool:
                return not (await search(c, question))["notices"]

            await eventually(settled)  # the server sees the new current model at its next check

    owner = await asyncpg.connect(scratch[1])
    try:
        models = await owner.fetch("SELECT id, name, current_since IS NOT NULL AS current FROM engram.embedding_models")
        current = {r["name"]: r["current"] for r in models}
        assert current == {"all-MiniLM-L6-v2": False, other_model: True}
        new_id = next(r["id"] for r in models if r["name"] == other_model)
        indexes = await owner.fetch("SELECT indexname FROM pg_indexes WHERE indexname LIKE 'search_docs_vec_%'")
        assert [r[0] for r in indexes] == [f"search_docs_vec_{new_id}"] * 2  # one per tenant, the old ones gone
    finally:
        await owner.close()
