"""One MCP endpoint per tool set (/mcp, /mcp/memory, /mcp/neo4j), through the SDK's client over HTTP.

Each endpoint lists exactly its own tools and names only them in its instructions; has its own
protected resource metadata and 401 challenge; accepts only tokens whose audience names it (API
keys excepted, docs/auth.md); and an endpoint that ENGRAM_TOOL_SETS leaves out answers 404. The
sizes of the tools/list answers that docs/tools.md states are measured here, so the doc cannot rot.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx2
import orjson
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from app.auth.principal import ADMIN, READ, WRITE
from app.config import ENDPOINT_PATHS, Settings
from app.mcp.server import build_endpoints
from app.observability.usage import Usage
from app.services import Services
from app.services.indexing import Indexer
from app.store.database import Database
from tests.support.auth import REDIRECT, add_user, jwt_part, register
from tests.support.client import connect, ok
from tests.support.oauth_agent import oauth_client
from tests.support.server import ROOT, Server, serve, serve_builtin

# The originals' tools: the seven they share, and each one's two reads.
SHARED = {
    "create_entities",
    "create_relations",
    "add_observations",
    "delete_entities",
    "delete_observations",
    "delete_relations",
    "read_graph",
}
MEMORY = SHARED | {"search_nodes", "open_nodes"}
NEO4J = SHARED | {"search_memories", "find_memories_by_name"}
CHATGPT = {"search", "fetch"}  # ChatGPT's two; its `search` is not the native one
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
SIZE_TOLERANCE = 0.03  # docs/tools.md rounds, and small edits need not touch it; a new tool does


def native_tools() -> set[str]:
    """The native set as this code registers it (no database needed), so other tools can join it."""
    settings = Settings(database_url="postgresql://nobody@127.0.0.1:1/none", embedding_provider="none")
    db = Database.from_settings(settings)
    services = Services.from_settings(settings, db, Indexer.from_settings(db, settings), fairness=None)
    native = build_endpoints(settings, services, None, Usage())[0]  # type: ignore[arg-type]
    assert native.tool_set == "native"
    return set(native.scopes)


async def post(url: str, message: dict[str, Any], token: str | None = None) -> httpx2.Response:
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    async with httpx2.AsyncClient(timeout=30) as http:
        return await http.post(url, content=orjson.dumps(message), headers=headers)


def metadata_url(server: Server, tool_set: str) -> str:
    return f"{server.base}/.well-known/oauth-protected-resource{ENDPOINT_PATHS[tool_set]}"


def challenge_names(response: httpx2.Response, metadata: str) -> bool:
    return response.status_code == 401 and f'resource_metadata="{metadata}"' in response.headers["www-authenticate"]


# --- every endpoint served (the default) ----------------------------------------------------------------


async def test_each_endpoint_lists_exactly_its_tools_and_names_only_them(server, tenant):
    expected = {"native": native_tools(), "memory": MEMORY, "neo4j": NEO4J, "chatgpt": CHATGPT}
    assert not expected["native"] & (MEMORY | NEO4J)
    for tool_set, tools in expected.items():
        async with server.at(tool_set).client(tenant, (READ, WRITE, ADMIN)) as c:  # every tool listed
            listed = {t.name for t in (await c.list_tools()).tools}
            assert listed == tools, tool_set
            others = set().union(*(t for s, t in expected.items() if s != tool_set)) - tools
            assert c.instructions is not None
            named = {t for t in tools | others if re.search(rf"\b{t}\b", c.instructions)}
            assert named and named <= tools, (tool_set, named - tools)
            resources = {r.uri for r in (await c.list_resources()).resources}
            prompts = {p.name for p in (await c.list_prompts()).prompts}
        assert resources == ({"memory://knowledge-graph"} if tool_set in ("native", "memory") else set()), tool_set
        assert prompts == ({"use_memory"} if tool_set == "native" else set()), tool_set


async def test_the_endpoints_share_one_memory(server, tenant):
    async with server.at("memory").client(tenant) as m, server.at("neo4j").client(tenant) as n:
        ok(
            await m.call_tool(
                "create_entities", {"entities": [{"name": "Ada", "entityType": "person", "observations": []}]}
            )
        )
        found = ok(await n.call_tool("find_memories_by_name", {"names": ["Ada"]}))
    assert found["entities"] == [{"name": "Ada", "type": "person", "observations": []}]
    async with server.client(tenant) as c:
        assert ok(await c.call_tool("get_entity", {"name": "Ada"}))["type"] == "person"


async def test_each_endpoint_has_its_own_resource_metadata_and_challenge(server):
    for tool_set, path in ENDPOINT_PATHS.items():
        metadata = httpx2.get(metadata_url(server, tool_set), timeout=10).json()
        assert metadata["resource"] == f"{server.base}{path}", tool_set
        assert metadata["authorization_servers"] == [server.base]
        refused = await post(f"{server.base}{path}", INITIALIZE)
        assert challenge_names(refused, metadata_url(server, tool_set)), (tool_set, refused.headers)
    root = httpx2.get(f"{server.base}/.well-known/oauth-protected-resource", timeout=10).json()
    assert root["resource"] == f"{server.base}/mcp"


async def test_a_token_for_one_endpoint_is_refused_at_the_others(server, tenant):
    for tool_set, path in ENDPOINT_PATHS.items():
        token = server.token(tenant, audience=f"{server.base}{path}")
        async with connect(f"{server.base}{path}", token) as c:
            assert (await c.list_tools()).tools
        for other in ENDPOINT_PATHS.keys() - {tool_set}:
            refused = await post(f"{server.base}{ENDPOINT_PATHS[other]}", INITIALIZE, token)
            assert challenge_names(refused, metadata_url(server, other)), (tool_set, other, refused.status_code)


async def test_get_is_refused_on_every_endpoint(server):
    for path in ENDPOINT_PATHS.values():
        headers = {"Authorization": f"Bearer {server.token('anyone')}", "Accept": "text/event-stream"}
        got = httpx2.get(f"{server.base}{path}", headers=headers, timeout=5)
        assert got.status_code == 405 and got.headers["allow"] == "POST", path


async def test_drop_in_calls_are_labelled_apart_in_the_metrics(server, tenant):
    for tool_set in ("memory", "neo4j"):
        async with server.at(tool_set).client(tenant) as c:
            ok(await c.call_tool("read_graph", {}))
    page = httpx2.get(f"http://127.0.0.1:{server.env['ENGRAM_METRICS_PORT']}/metrics", timeout=10).text
    labelled = set(re.findall(r'engram_tool_calls_total\{[^}]*tool="([^"]+)"', page))
    assert {"read_graph", "neo4j/read_graph"} <= labelled


# --- the sizes docs/tools.md states -------------------------------------------------------------------


def documented_sizes() -> dict[str, tuple[int, int]]:
    """`| `/mcp/memory` | 9 | 10,616 |` rows of docs/tools.md: path -> (tools, bytes)."""
    doc = (ROOT / "docs" / "tools.md").read_text()
    rows = re.findall(r"^\| `(/mcp[a-z0-9/]*)` \| (\d+) \| ([\d,]+) \|", doc, re.MULTILINE)
    return {path: (int(count), int(size.replace(",", ""))) for path, count, size in rows}


async def test_tools_list_sizes_are_the_documented_ones(plain, tenant):
    """The whole HTTP body of each endpoint's tools/list answer, as the SDK's client receives it."""
    server = plain
    documented = documented_sizes()
    assert set(documented) == set(ENDPOINT_PATHS.values())
    bodies: list[bytes] = []

    async def keep(response: httpx2.Response) -> None:
        bodies.append(await response.aread())

    for path in ENDPOINT_PATHS.values():
        headers = {"Authorization": f"Bearer {server.token(tenant)}"}
        http = httpx2.AsyncClient(headers=headers, timeout=30, event_hooks={"response": [keep]})
        async with Client(streamable_http_client(f"{server.base}{path}", http_client=http)) as c:
            bodies.clear()
            tools = (await c.list_tools()).tools
        answer = next(b for b in bodies if b.startswith(b"{") and b'"tools"' in b)
        count, size = documented[path]
        assert len(tools) == count, (path, len(tools))
        assert abs(len(answer) - size) <= size * SIZE_TOLERANCE, (
            f"{path}: docs/tools.md says {size}, sent {len(answer)}"
        )


# --- some endpoints switched off; the built-in authorization server --------------------------------------


@pytest.fixture(scope="module")
def memory_only(db_settings) -> Iterator[Server]:
    with serve(db_settings, ENGRAM_TOOL_SETS="memory", ENGRAM_EMBEDDING_PROVIDER="none") as running:
        yield running.at("memory")


async def test_an_endpoint_switched_off_answers_404(memory_only, tenant):
    token = memory_only.token(tenant, audience=[f"{memory_only.base}{p}" for p in ENDPOINT_PATHS.values()])
    for tool_set in ("native", "neo4j"):
        assert (await post(f"{memory_only.base}{ENDPOINT_PATHS[tool_set]}", INITIALIZE, token)).status_code == 404
        assert httpx2.get(metadata_url(memory_only, tool_set), timeout=10).status_code == 404
    async with memory_only.client(tenant) as c:
        assert {t.name for t in (await c.list_tools()).tools} == MEMORY
    root = httpx2.get(f"{memory_only.base}/.well-known/oauth-protected-resource", timeout=10).json()
    assert root["resource"] == memory_only.url


async def test_the_authorization_server_issues_tokens_for_served_endpoints_only(memory_only):
    registered = await register(memory_only)
    assert registered.status_code == 201, registered.text
    params = {
        "response_type": "code",
        "client_id": registered.json()["client_id"],
        "redirect_uri": REDIRECT,
        "code_challenge": "x" * 43,
        "code_challenge_method": "S256",
        "state": "s",
    }
    async with httpx2.AsyncClient(timeout=30) as http:
        for resource in (f"{memory_only.base}/mcp", f"{memory_only.base}/mcp/neo4j", "https://elsewhere.example/mcp"):
            answer = await http.get(f"{memory_only.base}/authorize?{urlencode({**params, 'resource': resource})}")
            assert answer.status_code in (302, 303), answer.text
            assert parse_qs(urlsplit(answer.headers["location"]).query)["error"] == ["invalid_target"], resource
        served = await http.get(f"{memory_only.base}/authorize?{urlencode({**params, 'resource': memory_only.url})}")
        assert served.status_code in (302, 303) and "error" not in parse_qs(urlsplit(served.headers["location"]).query)


@pytest.fixture(scope="module")
def builtin(db_settings: Settings) -> Iterator[Server]:
    with serve_builtin(db_settings) as running:
        yield running


async def test_an_oauth_client_given_only_the_memory_endpoint_signs_in_and_works_there_only(builtin, tenant):
    person = add_user(builtin, tenant)
    memory = builtin.at("memory")
    http, storage = oauth_client(memory.url, person)
    async with Client(streamable_http_client(memory.url, http_client=http)) as c:
        entity = {"name": "By URL", "entityType": "t", "observations": []}
        made = ok(await c.call_tool("create_entities", {"entities": [entity]}))
        assert made["entities"][0]["name"] == "By URL"
        assert {t.name for t in (await c.list_tools()).tools} == MEMORY
    assert storage.tokens is not None
    token = storage.tokens.access_token
    claims = jwt_part(token, 1)
    assert claims["aud"] == memory.url and claims["tenant_id"] == tenant
    for tool_set in ("native", "neo4j"):
        refused = await post(f"{builtin.base}{ENDPOINT_PATHS[tool_set]}", INITIALIZE, token)
        assert challenge_names(refused, metadata_url(builtin, tool_set)), tool_set
    # The same person, by the native endpoint's URL, gets a token for it, and sees what was written.
    http, storage = oauth_client(builtin.url, person)
    async with Client(streamable_http_client(builtin.url, http_client=http)) as c:
        assert ok(await c.call_tool("get_entity", {"name": "By URL"}))["type"] == "t"
