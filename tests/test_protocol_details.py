"""The 2026-07-28 details: the routing headers a request carries must match its body (checked by
the SDK's transport, before any of Engram's code: tested here against the real server), list
results are marked private to the caller for caches, and an insufficient_scope challenge names
every scope the call needs (tests/test_auth.py)."""

from __future__ import annotations

from typing import Any

import httpx2
import orjson
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

HEADER_MISMATCH = -32020


async def _captured(server: Any, tenant: str, run: Any) -> list[tuple[dict[str, str], dict[str, Any]]]:
    """The requests the SDK's own client sent (2026-07-28): headers and body of each."""
    sent: list[tuple[dict[str, str], dict[str, Any]]] = []

    async def keep(request: httpx2.Request) -> None:
        if request.method == "POST":
            sent.append((dict(request.headers), orjson.loads(request.content)))

    token = server.token(tenant)
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30, event_hooks={"request": [keep]})
    async with Client(streamable_http_client(server.url, http_client=http)) as c:
        await run(c)
    return sent


def _send(server: Any, headers: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
    keep = {k: v for k, v in headers.items() if k.lower() not in ("content-length", "host")}
    answer = httpx2.post(server.url, headers=keep, content=orjson.dumps(body), timeout=30)
    assert answer.status_code in (200, 400), answer.text
    return orjson.loads(answer.content)


async def test_routing_headers_must_match_the_body(server, tenant):
    async def calls(c: Any) -> None:
        await c.list_tools()
        await c.call_tool("graph_stats", {})

    sent = await _captured(server, tenant, calls)
    listing = next((h, b) for h, b in sent if b.get("method") == "tools/list")
    call = next((h, b) for h, b in sent if b.get("method") == "tools/call")
    headers, body = listing
    assert headers["mcp-method"] == "tools/list"
    assert "tools" in _send(server, headers, body)["result"]  # as sent: answered
    refused = _send(server, {**headers, "mcp-method": "tools/call"}, body)
    assert refused["error"]["code"] == HEADER_MISMATCH, refused
    headers, body = call
    assert headers["mcp-name"] == "graph_stats"
    refused = _send(server, {**headers, "mcp-name": "upsert_entities"}, body)
    assert refused["error"]["code"] == HEADER_MISMATCH
    # A missing header is a mismatch too.
    missing = {k: v for k, v in headers.items() if k != "mcp-method"}
    assert _send(server, missing, body)["error"]["code"] == HEADER_MISMATCH


async def test_list_results_are_private_to_the_caller(server, tenant):
    async def lists(c: Any) -> None:
        await c.list_tools()
        await c.list_resources()
        await c.list_resource_templates()
        await c.list_prompts()

    sent = await _captured(server, tenant, lists)
    methods = {"tools/list", "resources/list", "resources/templates/list", "prompts/list"}
    seen = set()
    for headers, body in sent:
        if body.get("method") in methods:
            result = _send(server, headers, body)["result"]
            assert result.get("cacheScope") == "private", (body["method"], result.keys())
            seen.add(body["method"])
    assert seen == methods
