"""/hooks/claude-code while its database dies (SIGKILL, then restarted) or freezes (SIGSTOP, as in
a network partition), on a PostgreSQL of its own (tests/test_outages.py's `OwnPostgres`), under a
stream of prompts: every answer is `200` with a JSON object, nothing is logged as an error, and
every prompt posted is kept once the database answers again (a capture outlives its answer).

Also, on the suite's database: a server whose hooks must answer before anything could be done
(a deadline of 50 ms) still keeps every turn and still makes a tenant a hook meets first.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from app.config import Settings
from tests.support.client import ok
from tests.support.own_postgres import OwnPostgres, own_postgres_cluster
from tests.support.server import ROOT, START_SECONDS, Server, free_port, server_env

pytestmark = pytest.mark.asyncio

CALL_DEADLINE = 2.0
WORKERS = 3  # prompts posted at once, each from a session of its own
ROUNDS = 2  # outages per test


@contextlib.contextmanager
def logged_server(settings: Settings, log: Path, **extra: str) -> Iterator[Server]:
    """`engram serve` with its whole output (stdout and stderr) in `log`, to read what it logged."""
    port = free_port()
    env = server_env(settings, port, **extra)
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve"], env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT
        )
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + START_SECONDS
            while True:
                assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
                with contextlib.suppress(httpx2.TransportError):
                    if httpx2.get(f"{base}/healthz", timeout=1).status_code == 200:
                        break
                time.sleep(0.1)
            yield Server(f"{base}/mcp", base, settings.model_copy(update={"port": port}), env, process)
        finally:
            process.terminate()
            process.wait(timeout=30)


@pytest.fixture(scope="module")
def own_postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[OwnPostgres, Settings]]:
    yield from own_postgres_cluster(tmp_path_factory)


@pytest.fixture(scope="module")
def hook_server(own_postgres: tuple[OwnPostgres, Settings], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    _, settings = own_postgres
    log = tmp_path_factory.mktemp("hook-outages") / "server.log"
    with logged_server(
        settings,
        log,
        ENGRAM_EMBEDDING_PROVIDER="none",
        ENGRAM_STATEMENT_TIMEOUT_MS="1000",
        ENGRAM_CALL_DEADLINE_SECONDS=str(CALL_DEADLINE),
        ENGRAM_POOL_ACQUIRE_SECONDS="1",
        ENGRAM_POOL_MAX_SIZE="6",
        ENGRAM_TENANT_MAX_CONCURRENT="50",
        ENGRAM_TENANT_QUEUE_SECONDS="0",
        ENGRAM_TENANT_RATE="0",
    ) as running:
        yield running, log


def prompt_body(sid: str, prompt: str) -> dict[str, Any]:
    return {"session_id": sid, "cwd": "/home/dev/shop", "transcript_path": "/tmp/t.jsonl",
            "hook_event_name": "UserPromptSubmit", "prompt": prompt}  # fmt: skip


async def kept_texts(server: Server, tenant: str) -> list[str]:
    async with server.client(tenant) as c:
        page = ok(await c.call_tool("list_episodes", {"limit": 200, "max_tokens": 20000, "detail": "full"}))
    return [e["text"] for e in page["episodes"]]


async def until_kept(server: Server, tenant: str, wanted: set[str], seconds: float = 90) -> list[str]:
    """The tenant's episode texts once all of `wanted` are there (or the bound has passed)."""
    deadline = time.monotonic() + seconds
    while True:
        texts: list[str] = []
        try:
            texts = await kept_texts(server, tenant)
        except Exception as exc:  # the database may still be recovering
            print(f"listing failed: {exc!r}"[:300])
        if wanted <= set(texts) or time.monotonic() > deadline:
            return texts
        await asyncio.sleep(0.5)


async def under_prompts(server: Server, tenant: str, outage: Any) -> tuple[list[int], list[Any], set[str]]:
    """Prompts posted by WORKERS sessions without pause while `outage()` runs: each answer's status
    and body, and every prompt posted."""
    statuses: list[int] = []
    bodies: list[Any] = []
    posted: set[str] = set()
    running = True
    headers = {"Authorization": f"Bearer {server.token(tenant)}"}

    async def worker(n: int) -> None:
        sid = str(uuid.uuid4())
        async with httpx2.AsyncClient(timeout=30) as http:
            i = 0
            while running:
                text = f"note {n}-{i}: the shop's build step {i} runs after the linter"
                i += 1
                posted.add(text)
                r = await http.post(f"{server.base}/hooks/claude-code", json=prompt_body(sid, text), headers=headers)
                statuses.append(r.status_code)
                bodies.append(r.json() if r.status_code == 200 else r.text)
                await asyncio.sleep(0.05)

    tasks = [asyncio.create_task(worker(n)) for n in range(WORKERS)]
    try:
        await asyncio.sleep(1.0)  # prompts flowing
        for _ in range(ROUNDS):
            await outage()
            await asyncio.sleep(1.0)
    finally:
        running = False
        await asyncio.gather(*tasks)
    return statuses, bodies, posted


def errors_logged(log: Path) -> list[str]:
    """Lines logged as errors, and tracebacks printed outside the log's lines (a warning may carry one)."""
    return [line for line in log.read_text(errors="replace").splitlines()
            if '"level":"ERROR"' in line or '"level":"CRITICAL"' in line or line.startswith("Traceback")]  # fmt: skip


async def test_a_killed_database_under_prompts_answers_200_and_loses_no_turn(
    hook_server: Any,
    own_postgres: Any,
) -> None:
    server, log = hook_server
    pg, _ = own_postgres
    tenant = f"hook-kill-{uuid.uuid4().hex[:8]}"
    assert await kept_texts(server, tenant) == []  # the tenant made, the database answering

    async def kill_and_restart() -> None:
        pg.kill()
        await asyncio.sleep(0.5)  # prompts meeting a database that is gone
        await asyncio.to_thread(pg.start)

    await answered_and_kept(server, log, tenant, kill_and_restart, "killed")


async def answered_and_kept(server: Any, log: Path, tenant: str, disrupt: Any, what: str) -> None:
    """Prompts posted while `disrupt` runs: every answer a 200 with a JSON object, every turn kept
    once after the database answers again, no ERROR in the server's log."""
    statuses, bodies, posted = await under_prompts(server, tenant, disrupt)
    failed = [(s, b) for s, b in zip(statuses, bodies, strict=True) if s != 200 or not isinstance(b, dict)]
    print(f"{len(statuses)} prompts while the database was {what} {ROUNDS} times: {len(failed)} not 200")
    assert not failed, failed[:5]
    texts = await until_kept(server, tenant, posted)
    assert sorted(set(texts)) == sorted(texts), "a turn was kept twice"
    assert posted <= set(texts), f"{len(posted - set(texts))} of {len(posted)} turns lost"
    assert not errors_logged(log), errors_logged(log)[:3]


async def test_a_frozen_database_under_prompts_answers_200_and_loses_no_turn(
    hook_server: Any,
    own_postgres: Any,
) -> None:
    server, log = hook_server
    pg, _ = own_postgres
    tenant = f"hook-freeze-{uuid.uuid4().hex[:8]}"
    assert await kept_texts(server, tenant) == []

    async def freeze() -> None:
        pg.signal(signal.SIGSTOP)
        try:
            await asyncio.sleep(1.5)  # past the hook's deadline and a call's
        finally:
            pg.signal(signal.SIGCONT)

    await answered_and_kept(server, log, tenant, freeze, "frozen")


async def test_answers_that_cannot_wait_still_keep_every_turn_and_make_the_tenant(
    own_postgres: tuple[OwnPostgres, Settings], tmp_path: Path
) -> None:
    """A deadline of 50 ms (a loaded machine): answers are `{}` before the turn is kept; the turns are kept
    after their answers, and a tenant whose first contact is a hook comes to exist."""
    _, settings = own_postgres
    with logged_server(
        settings, tmp_path / "server.log", ENGRAM_EMBEDDING_PROVIDER="none", ENGRAM_HOOK_DEADLINE_SECONDS="0.05"
    ) as server:
        tenant = f"hook-late-{uuid.uuid4().hex[:8]}"  # never seen: its first contact is this hook
        sid = str(uuid.uuid4())
        headers = {"Authorization": f"Bearer {server.token(tenant)}"}
        said = [f"step {i}: the pricing cache moves to the price store" for i in range(5)]
        async with httpx2.AsyncClient(timeout=30) as http:
            for text in said:
                r = await http.post(f"{server.base}/hooks/claude-code", json=prompt_body(sid, text), headers=headers)
                assert r.status_code == 200 and isinstance(r.json(), dict), r.text
                stop = {**prompt_body(sid, ""), "hook_event_name": "Stop", "last_assistant_message": f"Done: {text}"}
                r = await http.post(f"{server.base}/hooks/claude-code", json=stop, headers=headers)
                assert r.status_code == 200 and isinstance(r.json(), dict), r.text
        wanted = set(said) | {f"Done: {t}" for t in said}
        texts = await until_kept(server, tenant, wanted)
        assert sorted(texts) == sorted(wanted)
