"""Fair sharing and bounds, against real servers: tenant rates, concurrent calls and quotas refused
with `limit` while other tenants are served; per-credential request rates (HTTP 429); bounded
walks, read_graph pages and hierarchy; GET /mcp refused; the embedding breaker kept closed by a
hostile caller; and `engram tenant set-limits`."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import httpx2
import orjson
import pytest

from app.config import Settings
from tests.support.client import error_code, ok
from tests.support.server import ROOT, Server, free_port, scratch_database, serve, server_env, start_server

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

BOUNDED = {
    "ENGRAM_EMBEDDING_PROVIDER": "none",
    "ENGRAM_TOOL_SETS": "native,memory,neo4j",
    "ENGRAM_WALK_LEVEL_EDGES": "50",
    "ENGRAM_WALK_FRONTIER": "20",
    "ENGRAM_GRAPH_PAGE_RELATIONS": "30",
    "ENGRAM_TENANT_QUEUE_SECONDS": "0",
}


@pytest.fixture(scope="module")
def bounded(db_settings: Settings) -> Iterator[Server]:
    """A server with small walk and page bounds, no embeddings, and no waiting for a busy tenant's slot."""
    with serve(db_settings, **BOUNDED) as running:
        yield running


def details(result: Any) -> dict[str, Any]:
    """The JSON details after a tool error's message."""
    text = result.content[0].text
    return orjson.loads(text[text.index(' {"') :])


def engram(server: Server, *args: str) -> str:
    """Run the `engram` command against the server's database; its standard output."""
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", *args], env=server.env, cwd=ROOT, capture_output=True, text=True, check=True
    )
    return done.stdout


def new_tenant() -> str:
    return f"lim-{uuid.uuid4().hex[:10]}"


async def seed(c: Any, names: list[str], **fields: Any) -> None:
    for start in range(0, len(names), 100):
        batch = [{"name": n, "type": "t", **fields} for n in names[start : start + 100]]
        ok(await c.call_tool("upsert_entities", {"entities": batch}))


# --- HTTP ------------------------------------------------------------------------------------------


def test_oversized_headers_are_refused(server):
    got = httpx2.get(f"{server.base}/healthz", headers={"X-Padding": "x" * 20_000}, timeout=5)
    assert got.status_code == 431


def test_credential_over_its_request_rate_gets_429(db_settings):
    with serve(db_settings, ENGRAM_EMBEDDING_PROVIDER="none", ENGRAM_TOKEN_RATE="0.01", ENGRAM_TOKEN_BURST="5") as s:
        ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        accept = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        busy = {**accept, "Authorization": f"Bearer {s.token(new_tenant())}"}
        other = {**accept, "Authorization": f"Bearer {s.token(new_tenant())}"}
        with httpx2.Client(timeout=10) as http:
            statuses = [http.post(s.url, json=ping, headers=busy).status_code for _ in range(5)]
            assert 429 not in statuses
            refused = http.post(s.url, json=ping, headers=busy)
            assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
            assert http.post(s.url, json=ping, headers=other).status_code != 429  # another credential is served


# --- tenant rate, concurrency and quotas -------------------------------------------------------------------


async def test_tenant_over_its_rate_is_refused_while_another_is_served(bounded):
    limited, free = new_tenant(), new_tenant()
    engram(bounded, "tenant", "create", limited)
    engram(bounded, "tenant", "set-limits", limited, "--rate", "0.001", "--burst", "3")
    async with bounded.client(limited) as a, bounded.client(free) as b:
        for _ in range(3):
            ok(await a.call_tool("find_entities", {}))
        refused, served = await asyncio.gather(
            a.call_tool("find_entities", {}), b.call_tool("upsert_entities", {"entities": [{"name": "x", "type": "t"}]})
        )
        assert error_code(refused) == "limit"
        why = details(refused)
        assert why["reason"] == "tenant_rate" and why["retry_after"] > 0
        assert ok(served)["results"][0]["status"] == "created"


async def test_tenant_over_its_concurrent_calls_is_refused_while_another_is_served(bounded):
    limited, free = new_tenant(), new_tenant()
    engram(bounded, "tenant", "create", limited)
    engram(bounded, "tenant", "set-limits", limited, "--max-concurrent", "1")
    async with bounded.client(limited) as a, bounded.client(free) as b:
        await seed(a, [f"e{i}" for i in range(30)])
        results = await asyncio.gather(
            *(a.call_tool("find_entities", {"limit": 20}) for _ in range(20)),
            *(b.call_tool("find_entities", {}) for _ in range(3)),
        )
    mine, theirs = results[:20], results[20:]
    refused = [r for r in mine if r.is_error]
    assert refused and len(refused) < 20  # one ran at a time; calls arriving meanwhile were refused
    assert {error_code(r) for r in refused} == {"limit"}
    assert {details(r)["reason"] for r in refused} == {"tenant_concurrency"}
    assert all(not r.is_error for r in theirs)


async def test_quotas_refuse_writes_in_their_transaction(bounded):
    limited, free = new_tenant(), new_tenant()
    engram(bounded, "tenant", "create", limited)
    engram(bounded, "tenant", "set-limits", limited, "--max-entities", "3", "--max-observations", "4")
    async with bounded.client(limited) as a, bounded.client(free) as b:
        ok(await a.call_tool("upsert_entities", {"entities": [{"name": "a", "type": "t", "observations": ["1", "2"]}]}))
        ok(await a.call_tool("upsert_entities", {"entities": [{"name": "b", "type": "t"}]}))
        over = {"entities": [{"name": "c", "type": "t"}, {"name": "d", "type": "t"}]}
        refused, served = await asyncio.gather(
            a.call_tool("upsert_entities", over), b.call_tool("upsert_entities", over)
        )
        assert error_code(refused) == "limit" and details(refused)["reason"] == "quota_entities"
        assert details(refused)["quota"] == 3
        assert [r["status"] for r in ok(served)["results"]] == ["created", "created"]
        assert ok(await a.call_tool("find_entities", {}))["total"] == 2  # nothing of the refused call landed

        many = {"items": [{"entity": "a", "observations": ["3", "4", "5"]}]}
        refused = await a.call_tool("append_observations", many)
        assert error_code(refused) == "limit" and details(refused)["reason"] == "quota_observations"
        ok(await a.call_tool("append_observations", {"items": [{"entity": "b", "observations": ["x", "y"]}]}))

        ok(await a.call_tool("remove_entities", {"entities": ["a"]}))  # frees one entity and two observations
        ok(await a.call_tool("upsert_entities", {"entities": [{"name": "c", "type": "t", "observations": ["z"]}]}))
        ok(await a.call_tool("upsert_entities", {"entities": [{"name": "d", "type": "t"}]}))
        assert error_code(await a.call_tool("restore_entities", {"ids": [await _id_of_deleted(bounded, limited)]})) == (
            "limit"
        )


async def _id_of_deleted(server: Server, tenant: str) -> str:
    conn = await asyncpg.connect(server.env["ENGRAM_ADMIN_DATABASE_URL"])
    try:
        schema = await conn.fetchval("SELECT schema_name FROM engram.tenants WHERE key = $1", tenant)
        return str(await conn.fetchval(f"SELECT id FROM {schema}.entities WHERE deleted_at IS NOT NULL"))
    finally:
        await conn.close()


def test_set_limits_round_trip(bounded):
    tenant = new_tenant()
    engram(bounded, "tenant", "create", tenant)
    said = engram(bounded, "tenant", "set-limits", tenant, "--rate", "2.5", "--max-entities", "7")
    assert "rate=2.5" in said and "max_entities=7" in said
    shown = engram(bounded, "tenant", "show", tenant)
    assert "limit.rate: 2.5 (set for this tenant)" in shown
    assert "limit.max_entities: 7 (set for this tenant)" in shown
    assert "limit.burst: 200 (default)" in shown and "usage.entities: 0" in shown
    engram(bounded, "tenant", "set-limits", tenant, "--rate", "default")
    shown = engram(bounded, "tenant", "show", tenant)
    assert "limit.rate: 50.0 (default)" in shown and "limit.max_entities: 7 (set for this tenant)" in shown
    bad = subprocess.run(
        [sys.executable, "-m", "app.cli", "tenant", "set-limits", tenant, "--burst", "many"],
        env=bounded.env,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert bad.returncode != 0 and "a number or `default`" in bad.stderr


# --- bounded work per call ------------------------------------------------------------------------------


async def test_oversized_observation_batches_are_refused(bounded):
    tenant = new_tenant()
    async with bounded.client(tenant) as c, bounded.at("memory").client(tenant) as m:
        heavy = [{"name": f"e{i}", "type": "t", "observations": [f"o{j}" for j in range(100)]} for i in range(11)]
        refused = await c.call_tool("upsert_entities", {"entities": heavy})
        assert error_code(refused) == "limit" and details(refused)["reason"] == "batch_texts"
        memory = [{"name": e["name"], "entityType": "t", "observations": e["observations"]} for e in heavy]
        assert error_code(await m.call_tool("create_entities", {"entities": memory})) == "limit"
        assert ok(await c.call_tool("find_entities", {}))["total"] == 0
        ok(await c.call_tool("upsert_entities", {"entities": heavy[:10]}))  # 1,000 observations: allowed


async def test_walks_and_read_graph_report_truncated_on_a_hub(bounded):
    leaves = [f"leaf {i:03}" for i in range(120)]
    tenant = new_tenant()
    async with bounded.client(tenant) as c:
        await seed(c, ["hub", "start", "end", *leaves])
        spokes = [{"from": "hub", "to": leaf, "type": "spoke"} for leaf in leaves]
        extra = [{"from": "start", "to": "hub", "type": "spoke"}, {"from": leaves[-1], "to": "end", "type": "spoke"}]
        for batch in (spokes[:100], spokes[100:] + extra):
            ok(await c.call_tool("connect_entities", {"relations": batch}))

        walk = ok(await c.call_tool("neighbors", {"entity": "hub", "depth": 1, "limit": 200}))
        assert walk["truncated"] and len(walk["neighbors"]) <= 50
        chain = ok(await c.call_tool("relation_chain", {"entity": "hub", "relation_type": "spoke"}))
        assert chain["truncated"]
        bundle = ok(await c.call_tool("subgraph", {"entities": ["hub"], "max_nodes": 500}))
        assert bundle["truncated"]
        path = ok(await c.call_tool("shortest_path", {"from": "start", "to": "end"}))
        assert path["truncated"]
        small = ok(await c.call_tool("neighbors", {"entity": "end", "depth": 1}))
        assert not small["truncated"]

    for tool_set, source, kind in (("memory", "from", "relationType"), ("neo4j", "source", "relationType")):
        async with bounded.at(tool_set).client(tenant) as d:
            entities, relations, cut, cursor = [], [], 0, None
            while True:
                page = ok(await d.call_tool("read_graph", {"cursor": cursor} if cursor else {}))
                assert len(page["relations"]) <= 30
                entities += [e["name"] for e in page["entities"]]
                relations += [(r[source], r[kind]) for r in page["relations"]]
                cut += bool(page.get("truncated"))
                if page.get("truncated"):
                    assert "nextCursor" in page and "relations capped" in page["note"]
                cursor = page.get("nextCursor")
                if not cursor:
                    break
            assert cut >= 3, tool_set  # the hub's 120 relations take four pages of 30: three say more follow
            assert sorted(entities) == sorted(["hub", "start", "end", *leaves])  # each once
            assert len(relations) == 122 and relations.count(("hub", "spoke")) == 120


async def test_hierarchy_of_5000_topics_does_not_stall_healthz(bounded):
    async with bounded.client(new_tenant()) as c:
        for start in range(0, 5000, 100):
            batch = [
                {"name": f"e{i}", "type": "t", "area": "big", "topic": f"topic {i:04}"}
                for i in range(start, start + 100)
            ]
            ok(await c.call_tool("upsert_entities", {"entities": batch}))
        ok(await c.call_tool("upsert_entities", {"entities": [{"name": "loose", "type": "t"}]}))
        async with httpx2.AsyncClient(timeout=10) as http:
            for _ in range(3):
                call = asyncio.create_task(c.call_tool("hierarchy", {}))
                answered = 0
                while not call.done():
                    assert (await http.get(f"{bounded.base}/healthz")).status_code == 200
                    answered += not call.done()
                assert answered >= 1  # /healthz was answered while the hierarchy call ran
                tree = ok(call.result())
        assert tree["total"] == 5001 and tree["truncated"]
        big = next(a for a in tree["areas"] if a["name"] == "big")
        assert big["count"] == 5000 and len(big["children"]) == 100  # counts stay exact; children are capped
        assert big["children"][0] == {
            "name": "topic 0000",
            "count": 1,
            "children": [{"name": None, "count": 1, "children": []}],
        }
        assert next(a for a in tree["areas"] if a["name"] is None)["count"] == 1


# --- the embedding breaker ------------------------------------------------------------------------------


@pytest.fixture
async def scratch(db_settings: Settings) -> AsyncIterator[tuple[str, str]]:
    """A database of its own, since another embedding model registers there: (app URL, owner URL)."""
    async with scratch_database(db_settings, "limits") as urls:
        yield urls


async def test_hostile_input_does_not_open_the_embedding_breaker(db_settings, scratch, embedding_server):
    port = free_port()
    env = server_env(
        db_settings,
        port,
        ENGRAM_DATABASE_URL=scratch[0],
        ENGRAM_ADMIN_DATABASE_URL=scratch[1],
        ENGRAM_EMBEDDING_PROVIDER="openai",
        ENGRAM_EMBEDDING_MODEL="all-MiniLM-L6-v2",
        ENGRAM_EMBEDDING_DIMENSIONS="384",
        ENGRAM_EMBEDDING_BASE_URL=embedding_server.url,
        ENGRAM_EMBEDDING_MAX_RETRIES="0",
    )
    process = start_server(env)
    try:
        s = Server(
            f"http://127.0.0.1:{port}/mcp",
            f"http://127.0.0.1:{port}",
            db_settings.model_copy(update={"port": port}),
            env,
            process,
        )
        embedding_server.max_chars = 1000
        async with s.client(new_tenant()) as hostile, s.client(new_tenant()) as other:
            long = {"name": "long", "type": "t", "observations": ["x" * 3000]}
            pending = ok(await hostile.call_tool("upsert_entities", {"entities": [long]}))["embeddings_pending"]
            assert pending == 2  # the provider refused the texts: saved, found by words, left unembedded
            fine = ok(await other.call_tool("upsert_entities", {"entities": [{"name": "ok", "type": "t"}]}))
            assert fine["embeddings_pending"] == 0  # the breaker did not open: other callers still get vectors

            heavy = [
                {"name": f"e{i}", "type": "t", "observations": [f"fact {i}-{j}" for j in range(100)]} for i in range(10)
            ]
            big = ok(await hostile.call_tool("upsert_entities", {"entities": heavy}))
            assert big["embeddings_pending"] == 1010 - 128  # at most ENGRAM_EMBED_SYNC_TEXTS embedded in the call
            fine = ok(await other.call_tool("upsert_entities", {"entities": [{"name": "ok 2", "type": "t"}]}))
            assert fine["embeddings_pending"] == 0
    finally:
        process.terminate()
        process.wait(timeout=30)


async def test_an_address_sending_refused_credentials_is_throttled(db_settings):
    """Guessing tokens or API keys costs the guesser: past a burst of refusals, 429 before any lookup."""
    with serve(
        db_settings, ENGRAM_AUTH_FAILURE_BURST="5", ENGRAM_AUTH_FAILURE_RATE="0.1", ENGRAM_EMBEDDING_PROVIDER="none"
    ) as s:
        statuses = []
        async with httpx2.AsyncClient() as http:
            for i in range(7):
                answer = await http.post(
                    s.url,
                    headers={"Authorization": f"Bearer egk_{i:012d}_{'x' * 43}", "Content-Type": "application/json"},
                    content=b"{}",
                )
                statuses.append(answer.status_code)
            assert answer.headers.get("retry-after")
            good = await http.post(
                s.url,
                headers={
                    "Authorization": f"Bearer {s.token('throttled-tenant')}",
                    "Content-Type": "application/json",
                    "Accept": "application/json, text/event-stream",
                },
                content=b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}',
            )
    assert statuses[:5] == [401] * 5 and statuses[5:] == [429, 429]
    assert good.status_code == 429  # the address, not the credential, is throttled
