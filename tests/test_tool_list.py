"""The tools/list a client can afford (docs/tools.md, "What tools/list costs"): its size, what each
caller is shown, titles, and every tool called with arguments built from its listing alone.

The last test is the measure of "without losing what a model needs": arguments are made from the
listed input schema and description only (required properties, the first alternative the
description names — "Give exactly one of `id` or `name`." —, an example where the listing gives
one), the way a model fills them in, and no call may be refused as `invalid`. Domain answers
(`not_found`, `conflict`) are fine: they are about the data.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from app.auth.principal import READ, WRITE
from app.config import ENDPOINT_PATHS, Settings
from app.mcp.server import build_endpoints
from app.observability.usage import Usage
from tests.support.client import error_code, ok, text
from tests.support.listing import ALL, OFFLINE_SERVICES, OFFLINE_SETTINGS, ROOT_REFUSED, SCOPES, seed
from tests.support.server import Server, serve

BUDGET = 25_500  # bytes of the native tools/list answer a read-write token gets (about 6.4k tokens)


async def _listing(server: Server, tenant: str, tool_set: str, scopes: tuple[str, ...]) -> tuple[list[Any], int]:
    """The tools an endpoint lists to a token with `scopes`, and the size of the HTTP answer."""
    bodies: list[bytes] = []

    async def keep(response: httpx2.Response) -> None:
        bodies.append(await response.aread())

    headers = {"Authorization": f"Bearer {server.token(tenant, scopes)}"}
    http = httpx2.AsyncClient(headers=headers, timeout=30, event_hooks={"response": [keep]})
    async with Client(streamable_http_client(f"{server.base}{ENDPOINT_PATHS[tool_set]}", http_client=http)) as c:
        bodies.clear()
        tools = (await c.list_tools()).tools
    return tools, len(next(b for b in bodies if b.startswith(b"{") and b'"tools"' in b))


async def test_the_native_list_fits_the_budget(plain, tenant):
    tools, size = await _listing(plain, tenant, "native", (READ, WRITE))
    assert size <= BUDGET, f"the native tools/list is {size} bytes, over {BUDGET}"
    assert all(t.output_schema is None and t.meta is None for t in tools)  # ENGRAM_TOOL_OUTPUT_SCHEMAS=false


@pytest.mark.parametrize("tool_set", list(SCOPES))
async def test_a_caller_sees_only_the_tools_its_scopes_allow(server, tenant, tool_set):
    for held in [(READ,), (WRITE,), (READ, WRITE), ALL]:
        tools, _ = await _listing(server, tenant, tool_set, held)
        assert {t.name for t in tools} == {n for n, s in SCOPES[tool_set].items() if s in held}, held
    read_only, _ = await _listing(server, tenant, tool_set, (READ,))
    assert read_only and all(t.annotations and t.annotations.read_only_hint for t in read_only)


@pytest.mark.parametrize("tool_set", list(SCOPES))
async def test_every_tool_has_a_title(server, tenant, tool_set):
    tools, _ = await _listing(server, tenant, tool_set, ALL)
    # The neo4j drop-in keeps its reference's shape: the title in its annotations.
    assert all(t.title or (t.annotations and t.annotations.title) for t in tools)
    if tool_set not in ("memory", "neo4j"):
        assert all(t.title for t in tools)


@pytest.fixture(scope="module")
def output_schemas(db_settings) -> Iterator[Server]:
    with serve(db_settings, ENGRAM_TOOL_OUTPUT_SCHEMAS="true", ENGRAM_DISABLED_TOOLS="native/query_graph") as s:
        yield s


async def test_an_operator_narrows_a_tool_set_and_may_list_output_schemas(output_schemas, tenant):
    tools, _ = await _listing(output_schemas, tenant, "native", ALL)
    assert {t.name for t in tools} == set(SCOPES["native"]) - {"query_graph"}
    assert all(t.output_schema for t in tools)
    async with output_schemas.client(tenant, ALL) as c:
        refused = await c.call_tool("query_graph", {"query": "RETURN 1"})
    assert refused.is_error  # not served: unknown to the endpoint


@pytest.mark.parametrize("tool_set", list(SCOPES))
async def test_every_input_schema_is_one_the_model_apis_accept(server, output_schemas, tenant, tool_set):
    for at in (server, output_schemas):  # compact and full listings
        tools, _ = await _listing(at, tenant, tool_set, ALL)
        for tool in tools:
            schema = tool.input_schema
            assert schema.get("type") == "object", tool.name
            assert not ROOT_REFUSED & set(schema), (tool_set, tool.name, sorted(ROOT_REFUSED & set(schema)))


@pytest.mark.parametrize(
    ("tool", "arguments", "refusal"),
    [
        ("get_entity", {}, "give exactly one of `id` or `name`"),
        ("get_entity", {"id": "00000000-0000-0000-0000-000000000001", "name": "Ada"}, "exactly one of `id` or `name`"),
        ("update_entity", {"changes": {"description": "x"}}, "exactly one of `id` or `name`"),
        ("entity_history", {}, "exactly one of `id` or `name`"),
        ("add_aliases", {"aliases": ["A"]}, "exactly one of `id` or `name`"),
        ("remove_aliases", {"aliases": ["A"], "id": None, "name": None}, "exactly one of `id` or `name`"),
        ("disconnect_entities", {}, "give at least one of `relations` or `ids`"),
        ("invalidate_relations", {"relations": [], "ids": []}, "give at least one of `relations` or `ids`"),
    ],
)
async def test_alternatives_are_checked_by_the_tool_and_change_nothing(server, tenant, tool, arguments, refusal):
    async with server.client(tenant, ALL) as c:
        ok(await c.call_tool("upsert_entities", {"entities": [{"name": "Ada", "type": "person"}]}))
        before = ok(await c.call_tool("get_entity", {"name": "Ada", "detail": "full"}))
        result = await c.call_tool(tool, arguments)
        assert result.is_error and error_code(result) == "invalid" and refusal in text(result), text(result)
        assert ok(await c.call_tool("get_entity", {"name": "Ada", "detail": "full"})) == before


def test_disabled_tools_must_exist():
    settings = OFFLINE_SETTINGS.model_copy(update={"disabled_tools": ["native/no_such_tool"]})
    with pytest.raises(ValueError, match="no_such_tool"):
        build_endpoints(settings, OFFLINE_SERVICES, None, Usage())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="SET/TOOL"):
        Settings(database_url="postgresql://x@127.0.0.1:1/x", disabled_tools="query_graph")


# --- every tool called from its listing alone ------------------------------------------------------


@pytest.mark.parametrize("tool_set", list(SCOPES))
async def test_every_tool_is_called_right_from_its_listing_alone(server, tool_set):
    tools, _ = await _listing(server, "listing-probe", tool_set, ALL)
    assert {t.name for t in tools} == set(SCOPES[tool_set])
    for tool in tools:
        tenant = f"test-listing-{tool_set}-{tool.name}"[:60]
        async with server.client(tenant, ALL) as native, server.at(tool_set).client(tenant, ALL) as c:
            arguments = (await seed(native)).for_tool(tool.input_schema, tool.description)
            result = await c.call_tool(tool.name, arguments)
        if result.is_error:
            assert error_code(result) in ("not_found", "conflict", "ambiguous"), (tool.name, arguments, result.content)
        else:
            assert result.structured_content is not None, tool.name
            if tool_set == "native":  # the record is structured; the text is the tool's concise answer
                assert not text(result).startswith(("{", "[")), (tool.name, text(result)[:200])
