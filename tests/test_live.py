"""Live memory across replicas: two server processes on one database, SDK clients on each. A write
through one reaches a subscriber on the other (subscriptions/listen, 2026-07-28); another tenant's
subscriber hears nothing; streams are bounded per principal and closed when quiet."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import orjson
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.support.client import connect, ok
from tests.support.server import Server, serve

GRAPH = "memory://knowledge-graph"
# A bound on waiting for something that should come at once, not a timing assertion.
WAIT = 20


@pytest.fixture(scope="module")
def replicas(db_settings) -> Iterator[tuple[Server, Server]]:
    extra = {"ENGRAM_EMBEDDING_PROVIDER": "none", "ENGRAM_SUBSCRIPTIONS_PER_PRINCIPAL": "2"}
    with serve(db_settings, **extra) as one, serve(db_settings, **extra) as two:
        yield one, two


async def _next_uris(sub: Any, count: int) -> list[str]:
    got: list[str] = []
    with anyio.fail_after(WAIT):
        async for event in sub:
            got.append(event.uri)
            if len(got) >= count:
                break
    return got


@pytest.mark.parametrize("path", ["/mcp", "/mcp/memory"])
async def test_a_write_on_one_replica_reaches_a_listener_on_the_other(replicas, tenant, path):
    one, two = replicas
    ada = "memory://entities/Ada Lovelace"
    ada_encoded = "memory://entities/Ada%20Lovelace"
    follow = [GRAPH, ada, ada_encoded]
    async with (
        connect(one.base + path, one.token(tenant)) as listener,
        two.client(tenant) as writer,
        listener.listen(resource_subscriptions=follow) as sub,
    ):
        assert set(sub.honored.resource_subscriptions or []) == {GRAPH, ada, ada_encoded}
        ok(await writer.call_tool("upsert_entities", {"entities": [{"name": "Ada Lovelace", "type": "person"}]}))
        assert set(await _next_uris(sub, 3)) == {GRAPH, ada, ada_encoded}
        # A relation touches both ends; an entity nobody follows is not named.
        ok(await writer.call_tool("upsert_entities", {"entities": [{"name": "Babbage", "type": "person"}]}))
        assert await _next_uris(sub, 1) == [GRAPH]
        ok(
            await writer.call_tool(
                "connect_entities", {"relations": [{"from": "Babbage", "to": "Ada Lovelace", "type": "knows"}]}
            )
        )
        assert set(await _next_uris(sub, 3)) == {GRAPH, ada, ada_encoded}
        # A refused write announces nothing: the next event is the next real change.
        refused = await writer.call_tool(
            "connect_entities", {"relations": [{"from": "Nobody", "to": "Babbage", "type": "x"}]}
        )
        assert refused.is_error
        ok(await writer.call_tool("remove_entities", {"entities": ["Ada Lovelace"]}))
        assert set(await _next_uris(sub, 3)) == {GRAPH, ada, ada_encoded}
        # Reading through the listener's own replica shows the change.
        graph = await listener.read_resource(GRAPH)
        assert "Ada Lovelace" not in graph.contents[0].text


async def test_another_tenant_hears_nothing(replicas, tenant):
    one, two = replicas
    other = tenant + "-other"
    async with (
        one.client(other) as outsider,
        two.client(tenant) as writer,
        two.client(other) as own,
        outsider.listen(resource_subscriptions=[GRAPH, "memory://entities/Secret"]) as sub,
    ):
        ok(await writer.call_tool("upsert_entities", {"entities": [{"name": "Secret", "type": "t"}]}))
        ok(await writer.call_tool("append_observations", {"items": [{"entity": "Secret", "observations": ["x"]}]}))
        # Then a change of its own tenant: the first thing it hears.
        ok(await own.call_tool("upsert_entities", {"entities": [{"name": "Mine", "type": "t"}]}))
        assert await _next_uris(sub, 1) == [GRAPH]
        ok(await own.call_tool("upsert_entities", {"entities": [{"name": "Secret", "type": "t"}]}))
        assert set(await _next_uris(sub, 2)) == {GRAPH, "memory://entities/Secret"}


async def test_streams_are_bounded_per_principal(replicas, tenant):
    one, _ = replicas
    async with (
        one.client(tenant) as c,
        c.listen(resource_subscriptions=[GRAPH]),
        c.listen(resource_subscriptions=[GRAPH]),
    ):
        with pytest.raises(MCPError, match="at most 2 open subscriptions"):
            async with c.listen(resource_subscriptions=[GRAPH]):
                pass
        gauge = _metric(one, "engram_subscriptions")
        assert gauge >= 2
    # Closed streams give their places back.
    async with (
        one.client(tenant) as c,
        c.listen(resource_subscriptions=[GRAPH]),
        c.listen(resource_subscriptions=[GRAPH]),
    ):
        pass


async def test_a_listener_needs_read_scope_and_bounded_uris(replicas, tenant):
    one, _ = replicas
    async with one.client(tenant, scopes=("memory:write",)) as c:
        with pytest.raises(MCPError, match="memory:read"):
            async with c.listen(resource_subscriptions=[GRAPH]):
                pass
    async with one.client(tenant) as c:
        with pytest.raises(MCPError, match="at most 100 URIs"):
            async with c.listen(resource_subscriptions=[f"memory://entities/e{i}" for i in range(101)]):
                pass


async def test_a_quiet_stream_is_closed_and_a_listener_resumes(db_settings, tenant):
    with serve(db_settings, ENGRAM_EMBEDDING_PROVIDER="none", ENGRAM_SUBSCRIPTION_IDLE_SECONDS="1") as server:
        async with server.client(tenant) as c:
            with anyio.fail_after(WAIT):
                async with c.listen(resource_subscriptions=[GRAPH]) as sub:
                    async for _ in sub:  # ends when the server closes the quiet stream (gracefully: no error)
                        pass
            assert _metric(server, "engram_subscriptions_idle_closed_total") >= 1
            async with c.listen(resource_subscriptions=[GRAPH]) as sub:  # listening again works
                ok(await c.call_tool("upsert_entities", {"entities": [{"name": "Back", "type": "t"}]}))
                assert await _next_uris(sub, 1) == [GRAPH]
            assert _metric(server, "engram_subscription_notifications_total") >= 1


@asynccontextmanager
async def _legacy(server: Server, tenant: str) -> AsyncIterator[tuple[Any, Any]]:
    """A 2025-11-25 client (the handshake) and what it hears: resources/updated URIs."""
    heard, hearing = anyio.create_memory_object_stream[str](100)

    async def handler(message: Any) -> None:
        if getattr(message, "method", None) == "notifications/resources/updated":
            await heard.send(message.params.uri)

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {server.token(tenant)}"}, timeout=30)
    async with Client(
        streamable_http_client(server.url, http_client=http), mode="legacy", message_handler=handler
    ) as c:
        yield c, hearing


async def _heard(hearing: Any, count: int) -> list[str]:
    with anyio.fail_after(WAIT):
        return [await hearing.receive() for _ in range(count)]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
async def test_a_handshake_era_client_subscribes_and_hears_the_other_replica(replicas, tenant):
    one, two = replicas
    ada = "memory://entities/Ada"
    async with _legacy(one, tenant) as (c, hearing), two.client(tenant) as writer:
        assert c.server_capabilities.resources.subscribe is True
        await c.subscribe_resource(ada)
        ok(await writer.call_tool("upsert_entities", {"entities": [{"name": "Ada", "type": "person"}]}))
        assert await _heard(hearing, 1) == [ada]
        # What it does not follow it does not hear; after unsubscribing, nothing of Ada.
        await c.unsubscribe_resource(ada)
        await c.subscribe_resource(GRAPH)
        ok(await writer.call_tool("append_observations", {"items": [{"entity": "Ada", "observations": ["x"]}]}))
        assert await _heard(hearing, 1) == [GRAPH]
    # Another tenant's session hears nothing of this one.
    async with _legacy(one, tenant + "-other") as (c, hearing), two.client(tenant) as writer:
        await c.subscribe_resource(GRAPH)
        ok(
            await writer.call_tool(
                "upsert_entities", {"entities": [{"name": "Ada", "type": "person", "observations": ["y"]}]}
            )
        )
        async with two.client(tenant + "-other") as own:
            ok(await own.call_tool("upsert_entities", {"entities": [{"name": "Own", "type": "t"}]}))
        assert await _heard(hearing, 1) == [GRAPH]
        with pytest.raises(TimeoutError):
            with anyio.fail_after(1):
                await hearing.receive()


async def test_a_session_stream_needs_its_token_and_a_session(replicas, tenant):
    one, _ = replicas
    session = "s" * 43
    assert httpx2.get(one.url, headers={"Mcp-Session-Id": session}, timeout=10).status_code == 401
    token = {"Authorization": f"Bearer {one.token(tenant)}"}
    assert httpx2.get(one.url, headers=token, timeout=10).status_code == 405  # no session: no stream
    assert httpx2.get(one.url, headers={**token, "Mcp-Session-Id": "bad id"}, timeout=10).status_code == 405
    reader = {"Authorization": f"Bearer {one.token(tenant, ('memory:write',))}", "Mcp-Session-Id": session}
    assert httpx2.get(one.url, headers=reader, timeout=10).status_code == 403
    assert (
        httpx2.get(one.base + "/mcp/neo4j", headers={**token, "Mcp-Session-Id": session}, timeout=10).status_code == 405
    )


def _metric(server: Server, name: str) -> float:
    text = httpx2.get(f"http://127.0.0.1:{server.env['ENGRAM_METRICS_PORT']}/metrics", timeout=5).text
    values = [float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " ")]
    assert values, name
    return values[0]


async def test_a_foreign_session_id_claims_nothing(db_settings, tenant):
    """Subscriptions are the session's AND the principal's: one who learns another session's id and
    subscribes under it first neither drops the other's subscribe nor hears what the other follows."""
    from app.store import subscriptions
    from tests.support.server import open_database

    session = "v" * 43
    victim = orjson.dumps([tenant, "victim", "client"]).decode()
    thief = orjson.dumps([tenant, "thief", "client"]).decode()
    async with open_database(db_settings.runtime_dsn()) as db:
        owner = await db.tenant(tenant)
        await db.run(subscriptions.add, session, owner.id, owner.key, thief, [GRAPH, "memory://entities/X"])
        await db.run(subscriptions.add, session, owner.id, owner.key, victim, [GRAPH])
        assert await db.run(subscriptions.followed, session, victim) == {GRAPH}
        assert await db.run(subscriptions.followed, session, thief) == {GRAPH, "memory://entities/X"}
        # Unsubscribing under the same id touches only the caller's own rows.
        await db.run(subscriptions.remove, session, owner.key, thief, [GRAPH])
        assert await db.run(subscriptions.followed, session, victim) == {GRAPH}
        await db.run(subscriptions.remove, session, owner.key, victim, [GRAPH])
        assert await db.run(subscriptions.followed, session, victim) == frozenset()
