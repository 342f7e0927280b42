"""The tools/list a client can afford (docs/tools.md, "What tools/list costs"): its size, what each
caller is shown, titles, and every tool called with arguments built from its listing alone.

The last test is the measure of "without losing what a model needs": arguments are made from the
listed input schema and description only (required properties, the first alternative the
description names — "Give exactly one of `id` or `name`." —, an example where the listing gives
one), the way a model fills them in, and no call may be refused as `invalid`. Domain answers
(`not_found`, `conflict`) are fine: they are about the data.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Mapping
from typing import Any

import httpx2
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
from tests.support.client import error_code, ok, text
from tests.support.server import Server, serve

BUDGET = 24_000  # bytes of the native tools/list answer a read-write token gets (about 6k tokens)
ALL = (READ, WRITE, ADMIN)
# Each tool set's tools and the scope each needs, as this code registers them (no database needed).
_SETTINGS = Settings(database_url="postgresql://nobody@127.0.0.1:1/none", embedding_provider="none")
_DB = Database.from_settings(_SETTINGS)
_SERVICES = Services.from_settings(_SETTINGS, _DB, Indexer.from_settings(_DB, _SETTINGS), fairness=None)
SCOPES: dict[str, Mapping[str, str]] = {
    e.tool_set: e.scopes
    for e in build_endpoints(_SETTINGS, _SERVICES, None, Usage())  # type: ignore[arg-type]
}


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


# What the Anthropic Messages API and OpenAI's function calling accept as a tool's parameters: an
# object schema with no composition or value keyword at its root ("input_schema does not support
# oneOf, allOf, or anyOf at the top level"; OpenAI: "must have type 'object' and not have
# 'oneOf'/'anyOf'/'allOf'/'enum'/'not' at the top level"). Claude Code drops such a tool.
_ROOT_REFUSED = {"oneOf", "anyOf", "allOf", "not", "if", "then", "else", "enum", "const"}


@pytest.mark.parametrize("tool_set", list(SCOPES))
async def test_every_input_schema_is_one_the_model_apis_accept(server, output_schemas, tenant, tool_set):
    for at in (server, output_schemas):  # compact and full listings
        tools, _ = await _listing(at, tenant, tool_set, ALL)
        for tool in tools:
            schema = tool.input_schema
            assert schema.get("type") == "object", tool.name
            assert not _ROOT_REFUSED & set(schema), (tool_set, tool.name, sorted(_ROOT_REFUSED & set(schema)))


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
    settings = _SETTINGS.model_copy(update={"disabled_tools": ["native/no_such_tool"]})
    with pytest.raises(ValueError, match="no_such_tool"):
        build_endpoints(settings, _SERVICES, None, Usage())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="SET/TOOL"):
        Settings(database_url="postgresql://x@127.0.0.1:1/x", disabled_tools="query_graph")


# --- every tool called from its listing alone ------------------------------------------------------


class Values:
    """What a model would fill in: the memory's own names and ids, times, the listed bounds."""

    def __init__(self, names: list[str], entity_id: str) -> None:
        self.names = itertools.cycle(names)
        self.entity_id = entity_id

    def of(self, schema: dict[str, Any], defs: dict[str, Any]) -> Any:
        if "$ref" in schema:
            return self.of(defs[schema["$ref"].rsplit("/", 1)[-1]], defs)
        if schema.get("examples"):
            return schema["examples"][0]
        if "enum" in schema:
            return schema.get("default", schema["enum"][0])
        kind = schema.get("type")
        if kind == "object":
            return self.arguments(schema, defs)
        if kind == "array":
            count = max(schema.get("minItems", 0), 1)
            return [self.of(schema.get("items", {}), defs) for _ in range(count)]
        if kind == "string":
            if schema.get("format") in ("date-time", "uuid"):
                return {"date-time": "2024-01-31T12:00:00Z", "uuid": self.entity_id}[schema["format"]]
            name = next(self.names)
            if "pattern" in schema:  # the listing's pattern, followed as a model would: a name that fits
                name = next(n for n in (name, re.sub(r"\W", "_", name)) if re.search(schema["pattern"], n))
            return name
        if kind in ("integer", "number"):
            return schema.get("default", schema.get("minimum", 1))
        if kind == "boolean":
            return schema.get("default", False)
        raise AssertionError(f"no value for {schema}")

    def arguments(self, schema: dict[str, Any], defs: dict[str, Any], description: str = "") -> dict[str, Any]:
        required = list(schema.get("required", []))
        choice = re.search(r"Give (?:exactly|at least) one of `(\w+)`", description)
        if choice and choice[1] not in required:
            required.append(choice[1])
        properties = schema.get("properties", {})
        return {name: self.of(properties[name], defs) for name in required}


async def _seed(c: Client) -> Values:
    people = [{"name": f"Person {i}", "type": "person", "observations": [f"Person {i} likes tea"]} for i in range(3)]
    created = ok(await c.call_tool("upsert_entities", {"entities": people}))["results"]
    ok(await c.call_tool("connect_entities", {"relations": [{"from": "Person 0", "to": "Person 1", "type": "knows"}]}))
    ok(await c.call_tool("add_episodes", {"episodes": [{"text": "Person 0 met Person 1."}]}))
    return Values([p["name"] for p in people], created[0]["id"])


@pytest.mark.parametrize("tool_set", list(SCOPES))
async def test_every_tool_is_called_right_from_its_listing_alone(server, tool_set):
    tools, _ = await _listing(server, "listing-probe", tool_set, ALL)
    assert {t.name for t in tools} == set(SCOPES[tool_set])
    for tool in tools:
        tenant = f"test-listing-{tool_set}-{tool.name}"[:60]
        async with server.client(tenant, ALL) as native, server.at(tool_set).client(tenant, ALL) as c:
            values = await _seed(native)
            arguments = values.arguments(tool.input_schema, tool.input_schema.get("$defs", {}), tool.description or "")
            result = await c.call_tool(tool.name, arguments)
        if result.is_error:
            assert error_code(result) in ("not_found", "conflict", "ambiguous"), (tool.name, arguments, result.content)
        else:
            assert result.structured_content is not None, tool.name
            if tool_set == "native":  # the record is structured; the text is the tool's concise answer
                assert not text(result).startswith(("{", "[")), (tool.name, text(result)[:200])
