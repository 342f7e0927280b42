"""Outages: a database that stops answering (frozen with SIGSTOP, as in a network partition or a
stalled disk) or dies (SIGKILL) under a running server.

These tests run their own PostgreSQL (a fresh cluster in a temporary directory, started from the
same Debian root as `engram db up`) so that freezing and killing it touches no one else's database.
Bounds are generous multiples of the deadlines set here; what is asserted is the outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
import uuid
from collections.abc import Iterator
from typing import Any

import asyncpg
import httpx2
import orjson
import pytest
from mcp.shared.exceptions import MCPError

from app.config import Settings
from tests.support.client import ok
from tests.support.own_postgres import OwnPostgres, own_postgres_cluster
from tests.support.server import Server, serve

DEADLINE = 2.0  # ENGRAM_CALL_DEADLINE_SECONDS in these tests
READY_BUDGET = 3.0  # /readyz
STATUS_BUDGET = 2.0  # server_status
SLACK = 1.5  # scheduling on a shared machine


@pytest.fixture(scope="module")
def own_postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[OwnPostgres, Settings]]:
    yield from own_postgres_cluster(tmp_path_factory)


@pytest.fixture(scope="module")
def server(own_postgres: tuple[OwnPostgres, Settings]) -> Iterator[Server]:
    _, settings = own_postgres
    with serve(
        settings,
        ENGRAM_EMBEDDING_PROVIDER="none",
        ENGRAM_STATEMENT_TIMEOUT_MS="1000",
        ENGRAM_CALL_DEADLINE_SECONDS=str(DEADLINE),
        ENGRAM_POOL_ACQUIRE_SECONDS="1",
        ENGRAM_POOL_MAX_SIZE="4",
        ENGRAM_TENANT_MAX_CONCURRENT="20",
        ENGRAM_TENANT_QUEUE_SECONDS="0",
        ENGRAM_TENANT_RATE="0",
    ) as running:
        yield running


def failure(result: Any) -> tuple[str, dict[str, Any]]:
    """The code and details of a failed call."""
    assert result.is_error, result.structured_content
    text = result.content[0].text
    code = text.split("Error executing tool ", 1)[-1].split(": ", 2)[1]
    details = orjson.loads(text[text.index(' {"') :]) if ' {"' in text else {}
    return code, details


async def timed(coro: Any) -> tuple[Any, float]:
    started = time.monotonic()
    result = await coro
    return result, time.monotonic() - started


async def resource_error(client: Any, uri: str) -> str:
    """The message of a resource read that must fail (resources fail with a protocol error)."""
    with pytest.raises(MCPError) as refused:
        await client.read_resource(uri)
    return str(refused.value)


async def entity_names(pg: OwnPostgres, tenant: str) -> set[str]:
    """Live entity names of a tenant, read straight from the database as its owner."""
    conn = await asyncpg.connect(pg.state.url(admin=True))
    try:
        schema = await conn.fetchval("SELECT schema_name FROM engram.tenants WHERE key = $1", tenant)
        if schema is None:
            return set()
        rows = await conn.fetch(f'SELECT name FROM "{schema}".entities WHERE deleted_at IS NULL')
        return {r["name"] for r in rows}
    finally:
        await conn.close()


async def until_ok(server: Server, tenant: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while True:
        with contextlib.suppress(Exception):  # the transport may fail while the database recovers
            async with server.client(tenant) as c:
                if not (await c.call_tool("find_entities", {})).is_error:
                    return
        assert time.monotonic() < deadline, "the service did not resume"
        await asyncio.sleep(0.3)


async def test_a_frozen_database_fails_calls_within_their_deadline(own_postgres, server: Server) -> None:
    pg, _ = own_postgres
    tenant = f"frozen-{uuid.uuid4().hex[:8]}"
    http = httpx2.AsyncClient(timeout=30)
    async with server.client(tenant) as c:
        ok(await c.call_tool("upsert_entities", {"entities": [{"name": "before", "type": "t"}]}))
        assert (await http.get(f"{server.base}/readyz")).status_code == 200

        pg.signal(signal.SIGSTOP)
        try:
            write, read, ready, status, resource, api_key, token, *crowd = await asyncio.gather(
                timed(c.call_tool("upsert_entities", {"entities": [{"name": "during", "type": "t"}]})),
                timed(c.call_tool("get_entity", {"name": "before"})),
                timed(http.get(f"{server.base}/readyz")),
                timed(c.call_tool("server_status", {})),
                timed(resource_error(c, "memory://entities/before")),
                # outside any tool: an API key to look up, a step of the authorization server
                timed(
                    http.post(f"{server.url}", json={}, headers={"authorization": f"Bearer egk_{'a' * 12}_{'b' * 43}"})
                ),
                timed(http.post(f"{server.base}/token", data={"grant_type": "authorization_code", "code": "c"})),
                # more calls than the pool has connections (4)
                *(timed(c.call_tool("find_entities", {})) for _ in range(8)),
            )
            (written, write_took), (found, read_took) = write, read
            code, details = failure(written)
            assert code == "unavailable" and details["committed"] is False and details["retry_after"] > 0, details
            assert write_took < 3 * DEADLINE
            code, details = failure(found)
            assert code == "unavailable" and "committed" not in details and details["retry_after"] > 0
            assert read_took < 3 * DEADLINE
            for result, took in crowd:
                assert failure(result)[0] == "unavailable" and took < 3 * DEADLINE
            message, took = resource
            assert "unavailable" in message and "retry_after" in message and took < 3 * DEADLINE

            for answer, took in (api_key, token):
                assert answer.status_code == 503 and int(answer.headers["retry-after"]) >= 1, answer.text
                assert answer.json()["error"] == "temporarily_unavailable" and took < 3 * DEADLINE

            answer, took = ready
            assert answer.status_code == 503 and "database unreachable" in answer.json()["reason"]
            assert took < READY_BUDGET + SLACK

            result, took = status
            assert ok(result)["database"] == "unavailable" and ok(result)["tools"] == ["server_status"]
            assert took < STATUS_BUDGET + SLACK
            # Now known down: the next status answers without waiting for the database at all.
            result, took = await timed(c.call_tool("server_status", {}))
            assert ok(result)["database"] == "unavailable" and took < STATUS_BUDGET
            answer, took = await timed(http.get(f"{server.base}/readyz"))
            assert answer.status_code == 503 and took < READY_BUDGET + SLACK
            assert (await http.get(f"{server.base}/healthz")).status_code == 200
        finally:
            pg.signal(signal.SIGCONT)

    await until_ok(server, tenant)
    assert (await http.get(f"{server.base}/readyz")).status_code == 200
    async with server.client(tenant) as c:
        assert ok(await c.call_tool("server_status", {}))["database"] == "ok"
        ok(await c.call_tool("upsert_entities", {"entities": [{"name": "after", "type": "t"}]}))
    await asyncio.sleep(1)  # the frozen backends have read their dropped connections by now
    # The write its client was told failed did not commit after the thaw.
    assert await entity_names(pg, tenant) == {"before", "after"}
    await http.aclose()


async def test_a_killed_database_under_writes_loses_no_acknowledged_write(own_postgres, server: Server) -> None:
    pg, _ = own_postgres
    tenant = f"killed-{uuid.uuid4().hex[:8]}"
    acknowledged: set[str] = set()
    refused: dict[str, dict[str, Any]] = {}
    other: list[str] = []
    ready_codes: list[int] = []
    running = True

    async def writer(n: int) -> None:
        i = 0
        while running:
            name = f"w{n}-{i}"
            i += 1
            try:
                async with server.client(tenant) as c:
                    while running:
                        result = await c.call_tool("upsert_entities", {"entities": [{"name": name, "type": "t"}]})
                        if not result.is_error:
                            acknowledged.add(name)
                        else:
                            code, details = failure(result)
                            if code == "unavailable":
                                refused[name] = details
                            else:
                                other.append(result.content[0].text)
                        name = f"w{n}-{i}"
                        i += 1
            except Exception as exc:  # recorded: the transport must not fail either
                other.append(repr(exc))

    async def prober() -> None:
        async with httpx2.AsyncClient(timeout=30) as http:
            while running:
                ready_codes.append((await http.get(f"{server.base}/readyz")).status_code)
                await asyncio.sleep(0.05)

    await until_ok(server, tenant)
    tasks = [asyncio.create_task(writer(n)) for n in range(4)] + [asyncio.create_task(prober())]
    try:
        for _ in range(2):
            await asyncio.sleep(1.0)  # writes flowing
            before = len(acknowledged)
            pg.kill()
            await asyncio.sleep(1.0)  # writes failing
            await asyncio.to_thread(pg.start)
            await until_ok(server, tenant)
            await asyncio.sleep(1.0)
            assert len(acknowledged) > before, "writes did not resume after the restart"
    finally:
        running = False
        await asyncio.gather(*tasks)

    assert not other, other[:5]
    assert 500 not in ready_codes and 503 in ready_codes, sorted(set(ready_codes))
    assert refused, "no write was refused while the database was down"
    stored = await entity_names(pg, tenant)
    assert acknowledged <= stored, sorted(acknowledged - stored)[:10]
    # A write refused before its COMMIT was sent is not there; one whose COMMIT got no answer may be.
    dropped = {name for name, details in refused.items() if details.get("committed") is False}
    assert not (dropped & stored), sorted(dropped & stored)
    assert all(d.get("committed") in (False, "unknown") and d["retry_after"] > 0 for d in refused.values())


async def test_a_frozen_database_answers_hooks_empty_within_a_second(own_postgres, server: Server) -> None:
    """Claude Code waits for its hooks: a memory that does not answer must not hold the session up.
    Every hook answers `200 {}` within ENGRAM_HOOK_DEADLINE_SECONDS (0.8 s); its turn is kept later."""
    pg, _ = own_postgres
    warm, cold = f"hook-warm-{uuid.uuid4().hex[:8]}", f"hook-cold-{uuid.uuid4().hex[:8]}"
    sid = str(uuid.uuid4())
    url = f"{server.base}/hooks/claude-code"

    def body(event: str, **fields: Any) -> dict[str, Any]:
        return {"session_id": sid, "cwd": "/home/dev/shop", "transcript_path": "/tmp/t.jsonl",
                "hook_event_name": event, **fields}  # fmt: skip

    async with httpx2.AsyncClient(timeout=30) as http:

        def hook(credential: str, event: str, **fields: Any) -> Any:
            return timed(http.post(url, json=body(event, **fields), headers={"Authorization": f"Bearer {credential}"}))

        token = server.token(warm)
        r, _ = await hook(token, "UserPromptSubmit", prompt="remember the shop's port is 8443")
        assert r.status_code == 200
        pg.signal(signal.SIGSTOP)
        try:
            answers = await asyncio.gather(
                hook(token, "UserPromptSubmit", prompt="which port does the shop use?"),
                hook(token, "Stop", last_assistant_message="Port 8443."),
                hook(token, "SessionStart", source="startup"),
                # a tenant this server has not seen yet, and an API key it must look up
                hook(server.token(cold), "UserPromptSubmit", prompt="anything about the shop?"),
                hook(f"egk_{'c' * 12}_{'d' * 43}", "Stop", last_assistant_message="x"),
            )
            for answer, took in answers:
                assert answer.status_code == 200 and answer.json() == {}, answer.text
                assert took < 1.0 + SLACK, took
                print(f"hook answered {answer.json()} in {took:.3f} s with the database frozen")
        finally:
            pg.signal(signal.SIGCONT)
    await until_ok(server, warm)
    wanted = ["Port 8443.", "remember the shop's port is 8443", "which port does the shop use?"]
    for _ in range(120):  # the turns posted while it was frozen are kept once it answers, once each
        async with server.client(warm) as c:
            texts = [e["text"] for e in ok(await c.call_tool("list_episodes", {"detail": "full"}))["episodes"]]
        if len(texts) >= len(wanted):
            break
        await asyncio.sleep(0.5)
    assert sorted(texts) == wanted
