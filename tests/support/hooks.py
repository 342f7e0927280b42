"""What the hook tests share: hook inputs in the shapes Claude Code's hooks reference documents,
posted as its `"type": "http"` hooks post them, and the episodes a tenant holds."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from typing import Any

import httpx2
import orjson

from tests.support.client import connect, record
from tests.support.server import ROOT, Server


def engram(server: Server, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", *args], env=server.env, cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def new_tenant(server: Server) -> str:
    tenant = f"hooks-{uuid.uuid4().hex[:10]}"
    engram(server, "tenant", "create", tenant)
    return tenant


def session() -> str:
    return str(uuid.uuid4())


def common(sid: str, event: str, **fields: Any) -> dict[str, Any]:
    """The fields every event carries, as documented, with the event's own."""
    return {
        "session_id": sid,
        "transcript_path": f"/home/dev/.claude/projects/-home-dev-shop/{sid}.jsonl",
        "cwd": "/home/dev/shop",
        "permission_mode": "default",
        "hook_event_name": event,
        **fields,
    }


async def post(server: Server, token: str | None, body: Any, *, raw: bytes | None = None) -> httpx2.Response:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    async with httpx2.AsyncClient(timeout=30) as http:
        return await http.post(
            f"{server.base}/hooks/claude-code", content=raw if raw is not None else orjson.dumps(body), headers=headers
        )


def context(response: httpx2.Response) -> str | None:
    assert response.status_code == 200, response.text
    data = response.json()
    if data == {}:
        return None
    out = data["hookSpecificOutput"]
    assert set(out) == {"hookEventName", "additionalContext"}
    return str(out["additionalContext"])


async def kept(server: Server, tenant: str, at_least: int = 0, token: str | None = None) -> list[dict[str, Any]]:
    """Every episode the tenant holds that the caller sees (through the tools, as a person would read
    them: the shared ones and the caller's own private ones, such as the turns its hooks kept; the
    caller is `token`'s, else the suite's default user), once there are `at_least` (a turn's capture
    may end after its answer, on a loaded machine)."""
    deadline = time.monotonic() + 60
    while True:
        async with server.client(tenant) if token is None else connect(server.url, token) as c:
            page = record(await c.call_tool("list_episodes", {"limit": 200, "max_tokens": 20000, "detail": "full"}))
        if len(page["episodes"]) >= at_least or time.monotonic() > deadline:
            return list(page["episodes"])
        await asyncio.sleep(0.3)


async def seed(server: Server, tenant: str) -> None:
    """What other sessions left: a few facts and an earlier conversation."""
    async with server.client(tenant) as c:
        r = await c.call_tool(
            "upsert_entities",
            {
                "entities": [
                    {
                        "name": "Shop checkout",
                        "type": "service",
                        "observations": [
                            "the checkout service retries card payments three times with exponential backoff",
                            "checkout reads prices from the pricing cache, refreshed every 5 minutes",
                        ],
                    }
                ]
            },
        )
        assert not r.is_error, r.content
        r = await c.call_tool(
            "add_episodes",
            {"episodes": [{"text": "We decided to move the shop's payments from Stripe to Adyen in March."}]},
        )
        assert not r.is_error, r.content
