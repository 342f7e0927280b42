"""The chatgpt tool set at /mcp/chatgpt, through the SDK's client: `search` and `fetch` in the shapes
OpenAI documents for ChatGPT's connectors and deep research (docs/tools.md, "chatgpt"), each answer
exactly one text item holding the JSON, and hostile input refused without effect."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from mcp.types import CallToolResult

from app.auth.principal import READ, WRITE
from tests.support.client import error_code, ok
from tests.support.server import Server, serve

SEARCH_RESULT = {"id", "title", "url", "text"}
DOCUMENT = {"id", "title", "text", "url", "metadata"}


def _json(result: CallToolResult) -> dict[str, Any]:
    """The one text item the documented shape asks for, decoded; the structured content agrees."""
    assert not result.is_error, result.content
    assert len(result.content) == 1 and result.content[0].type == "text"
    decoded = json.loads(result.content[0].text)
    assert decoded == result.structured_content
    return decoded


async def _seed(server: Server, tenant: str) -> dict[str, str]:
    async with server.client(tenant) as c:
        created = ok(
            await c.call_tool(
                "upsert_entities",
                {
                    "entities": [
                        {
                            "name": "Ada Lovelace",
                            "type": "person",
                            "description": "Mathematician",
                            "observations": ["Wrote the first published program", "Worked with Babbage"],
                        },
                        {"name": "Analytical Engine", "type": "machine", "observations": ["Designed by Babbage"]},
                    ]
                },
            )
        )["results"]
        ok(await c.call_tool("add_aliases", {"name": "Ada Lovelace", "aliases": ["Countess of Lovelace"]}))
        ok(
            await c.call_tool(
                "connect_entities",
                {"relations": [{"from": "Ada Lovelace", "to": "Analytical Engine", "type": "programmed"}]},
            )
        )
    return {r["name"]: r["id"] for r in created}


async def test_lists_search_and_fetch_with_single_string_arguments(server, tenant):
    async with server.at("chatgpt").client(tenant, (READ,)) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
    assert set(tools) == {"search", "fetch"}
    for name, argument in (("search", "query"), ("fetch", "id")):
        schema = tools[name].input_schema
        assert schema["required"] == [argument] and schema["properties"][argument]["type"] == "string"
        assert set(schema["properties"]) == {argument}
        assert tools[name].annotations.read_only_hint and tools[name].title


async def test_search_and_fetch_answer_in_the_documented_shapes(server, tenant):
    ids = await _seed(server, tenant)
    async with server.at("chatgpt").client(tenant, (READ,)) as c:
        found = _json(await c.call_tool("search", {"query": "who wrote the first program?"}))
        assert set(found) == {"results"}
        assert found["results"], found
        for result in found["results"]:
            assert set(result) == SEARCH_RESULT and all(isinstance(v, str) and v for v in result.values())
        first = found["results"][0]
        assert (first["id"], first["title"]) == (ids["Ada Lovelace"], "Ada Lovelace (person)")
        # The console's page of the entity: where a citation leads.
        assert first["url"] == f"{server.base}/console/entity/{ids['Ada Lovelace']}"

        page = _json(await c.call_tool("fetch", {"id": first["id"]}))
    assert set(page) == DOCUMENT
    assert (page["id"], page["title"], page["url"]) == (first["id"], first["title"], first["url"])
    text = page["text"]
    for expected in ("Mathematician", "Countess of Lovelace", "- Wrote the first published program"):
        assert expected in text
    assert "- Ada Lovelace programmed Analytical Engine" in text
    assert page["metadata"]["type"] == "person" and page["metadata"]["observations"] == 2
    assert all(isinstance(v, str | int | float) for v in page["metadata"].values())


async def test_search_of_an_empty_memory_finds_nothing(server, tenant):
    async with server.at("chatgpt").client(tenant, (READ,)) as c:
        assert _json(await c.call_tool("search", {"query": "anything at all"})) == {"results": []}


@pytest.fixture(scope="module")
def no_console(db_settings) -> Iterator[Server]:
    with serve(db_settings, ENGRAM_CONSOLE="false") as running:
        yield running


async def test_without_the_console_the_url_is_the_entitys_resource(no_console, tenant):
    ids = await _seed(no_console, tenant)
    async with no_console.at("chatgpt").client(tenant, (READ,)) as c:
        page = _json(await c.call_tool("fetch", {"id": ids["Ada Lovelace"]}))
    assert page["url"] == "memory://entities/Ada%20Lovelace"


# --- hostile input -------------------------------------------------------------------------------------

BAD_QUERIES: list[Any] = ["", "   ", "a\x00b", "x" * 1001, 123, None, ["Ada"], {"q": "Ada"}, True]
BAD_IDS: list[Any] = ["", "a\x00b", "x" * 201, 7, None, ["x"], {"id": "x"}]


@pytest.mark.parametrize("query", BAD_QUERIES, ids=range(len(BAD_QUERIES)))
async def test_search_refuses_bad_queries(server, tenant, query):
    async with server.at("chatgpt").client(tenant, (READ,)) as c:
        assert error_code(await c.call_tool("search", {"query": query})) == "invalid"


@pytest.mark.parametrize("id_", BAD_IDS, ids=range(len(BAD_IDS)))
async def test_fetch_refuses_bad_ids(server, tenant, id_):
    async with server.at("chatgpt").client(tenant, (READ,)) as c:
        assert error_code(await c.call_tool("fetch", {"id": id_})) == "invalid"


@pytest.mark.parametrize(("tool", "argument"), [("search", "query"), ("fetch", "id")])
def test_a_lone_surrogate_is_refused(server, tenant, tool, argument):
    """Not Unicode text (no client library sends it, so the JSON is written by hand): the request is
    refused before any tool runs."""
    arguments = f'{{"{argument}":"a\\ud800"}}'
    call = f'{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"{tool}","arguments":{arguments}}}}}'
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "Authorization": f"Bearer {server.token(tenant, (READ,))}",
        "MCP-Protocol-Version": "2025-11-25",
    }
    answer = httpx2.post(f"{server.base}/mcp/chatgpt", content=call.encode(), headers=headers, timeout=10).json()
    assert answer["error"]["code"] == -32700  # the JSON parser refuses the unpaired \ud800


async def test_arguments_are_exactly_the_documented_ones(server, tenant):
    async with server.at("chatgpt").client(tenant, (READ,)) as c:
        for name, arguments in (
            ("search", {}),
            ("search", {"query": "Ada", "limit": 50}),
            ("fetch", {}),
            ("fetch", {"id": "Ada", "tenant": "someone-else"}),
        ):
            assert error_code(await c.call_tool(name, arguments)) == "invalid", (name, arguments)


async def test_fetch_reads_only_the_callers_own_live_entities(server, tenant):
    ids = await _seed(server, tenant)
    other = f"test-{uuid.uuid4().hex[:12]}"
    async with server.client(tenant) as c:
        ok(await c.call_tool("remove_entities", {"entities": ["Analytical Engine"]}))
    async with server.at("chatgpt").client(other, (READ,)) as c:  # another tenant: never found
        assert error_code(await c.call_tool("fetch", {"id": ids["Ada Lovelace"]})) == "not_found"
        assert _json(await c.call_tool("search", {"query": "Ada Lovelace"})) == {"results": []}
    async with server.at("chatgpt").client(tenant, (READ,)) as c:
        assert error_code(await c.call_tool("fetch", {"id": ids["Analytical Engine"]})) == "not_found"  # deleted
        for probe in ("x'); DROP TABLE entities; --", "MATCH (n) DETACH DELETE n", "$$ || pg_sleep(1) $$"):
            assert error_code(await c.call_tool("fetch", {"id": probe})) == "not_found"
            assert _json(await c.call_tool("search", {"query": probe}))["results"] is not None
        assert _json(await c.call_tool("fetch", {"id": ids["Ada Lovelace"]}))["id"] == ids["Ada Lovelace"]


async def test_the_tools_need_the_read_scope(server, tenant):
    async with server.at("chatgpt").client(tenant, (WRITE,)) as c:
        assert (await c.list_tools()).tools == []
