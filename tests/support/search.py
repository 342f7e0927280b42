"""Searching a tenant's memory through the tools, waiting for the background embedding filler, and
`engram reindex`."""

from __future__ import annotations

import asyncio
import subprocess
import time
from typing import Any

from tests.support.client import ok
from tests.support.server import Server, engram


async def search(client: Any, query: str, **args: Any) -> dict[str, Any]:
    return ok(await client.call_tool("search", {"query": query, **args}))


def names(result: dict[str, Any]) -> list[str]:
    return [h["entity"]["name"] for h in result["hits"]]


async def eventually(check: Any, seconds: float = 180) -> Any:
    """Poll `check()` (a coroutine) until it returns something truthy; the background filler is not instant."""
    deadline = time.monotonic() + seconds
    while True:
        if result := await check():
            return result
        assert time.monotonic() < deadline, "gave up waiting"
        await asyncio.sleep(0.5)


def reindex(server: Server, *args: str) -> subprocess.CompletedProcess[str]:
    return engram(server.env, "reindex", *args)
