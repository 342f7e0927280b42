"""The SDK's MCP client over streamable HTTP, and readers of what its tool calls answer."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import orjson
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult


@asynccontextmanager
async def connect(url: str, token: str | None, mode: str = "auto") -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=120))
    async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
        yield client


def ok(result: CallToolResult) -> dict[str, Any]:
    """The structured result of a successful call."""
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


async def upsert(client: Client, entities: list[dict[str, Any]]) -> dict[str, Any]:
    """`upsert_entities` with these entities, its structured result once it succeeded."""
    return ok(await client.call_tool("upsert_entities", {"entities": entities}))


async def relate(client: Client, relations: list[dict[str, Any]]) -> dict[str, Any]:
    """`connect_entities` with these relations, its structured result once it succeeded."""
    return ok(await client.call_tool("connect_entities", {"relations": relations}))


def record(result: CallToolResult) -> dict[str, Any]:
    """The complete record of a successful call: its structured content, or its `detail="full"` text."""
    assert not result.is_error, result.content
    return result.structured_content or orjson.loads(text(result))


async def embedded(client: Client, seconds: float = 60) -> None:
    """Until every text the tenant holds has its embedding (rankings by meaning are then stable)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        r = record(await client.call_tool("recall", {"query": "anything", "limit": 1, "detail": "full"}))
        if not any("no embedding" in n for n in r.get("notices", [])):
            return
        await asyncio.sleep(0.1)
    raise AssertionError("texts still wait for their embeddings")


def in_order(answer: str, needles: list[str]) -> None:
    """Every needle appears in `answer`, in the given order."""
    at = 0
    for n in needles:
        found = answer.find(n, at)
        assert found >= 0, (n, answer)
        at = found + len(n)


def text(result: CallToolResult) -> str:
    """The one text content of a result."""
    assert len(result.content) == 1 and result.content[0].type == "text"
    return result.content[0].text


def error_code(result: CallToolResult) -> str:
    """The machine-readable code of a failed call (`not_found`, `ambiguous`, ...)."""
    assert result.is_error, result.structured_content
    text = result.content[0].text  # type: ignore[union-attr]
    return text.split("Error executing tool ", 1)[-1].split(": ", 2)[1]


def dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def mcp_headers(token: str) -> dict[str, str]:
    """The headers of a raw MCP request over streamable HTTP carrying `token` (for a test that reads
    the HTTP answer itself, not through the SDK)."""
    return {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": "2025-11-25",
        "Accept": "application/json, text/event-stream",
    }


# A call of every tool that writes, in an order that succeeds on an empty tenant, and of every tool
# that only reads (the drop-in dialects' at /mcp/memory).
MUTATING = {
    "upsert_entities": {"entities": [{"name": "A", "type": "t"}, {"name": "B", "type": "t"}]},
    "append_observations": {"items": [{"entity": "A", "observations": ["one"]}]},
    "remove_observations": {"items": [{"entity": "A", "observations": ["one"]}]},
    "update_entity": {"name": "A", "changes": {"description": "changed"}},
    "connect_entities": {"relations": [{"from": "A", "to": "B", "type": "r"}]},
    "disconnect_entities": {"relations": [{"from": "A", "to": "B", "type": "r"}]},
    "remove_entities": {"entities": ["B"]},
    "create_entities": {"entities": [{"name": "C", "entityType": "t", "observations": []}]},
    "create_relations": {"relations": [{"from": "A", "to": "C", "relationType": "r"}]},
    "add_observations": {"observations": [{"entityName": "C", "contents": ["two"]}]},
    "delete_observations": {"deletions": [{"entityName": "C", "observations": ["two"]}]},
    "delete_relations": {"relations": [{"from": "A", "to": "C", "relationType": "r"}]},
    "delete_entities": {"entityNames": ["C"]},
}
READS = {
    "get_entity": {"name": "A"},
    "find_entities": {},
    "neighbors": {"entity": "A"},
    "read_graph": {},
    "search_nodes": {"query": "A"},
    "graph_stats": {},
    "entity_history": {"name": "A"},
}
