"""Both protocol eras, through the SDK's streamable-HTTP client against the real server."""

from __future__ import annotations

import httpx2
import pytest

from tests.support.client import ok, text

TOOLS = {"upsert_entities", "get_entity", "connect_entities", "neighbors"}


@pytest.mark.parametrize(("mode", "era"), [("legacy", "2025-11-25"), ("auto", "2026-07-28")])
async def test_both_eras_list_and_call_tools(client_for, tenant, mode, era):
    async with client_for(tenant, mode=mode) as client:
        assert client.protocol_version == era
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert set(listed) >= TOOLS
        for name in TOOLS:
            tool = listed[name]
            assert tool.description and tool.title, name  # no output schema: docs/tools.md
            assert tool.annotations is not None and tool.annotations.open_world_hint is False
        assert listed["get_entity"].annotations.read_only_hint is True
        assert not listed["upsert_entities"].annotations.read_only_hint  # the spec's default, left out

        created = ok(await client.call_tool("upsert_entities", {"entities": [{"name": f"{mode} thing", "type": "t"}]}))
        assert created["results"][0]["status"] == "created"
        got = ok(await client.call_tool("get_entity", {"name": f"{mode} thing"}))
        assert got["id"] == created["results"][0]["id"]


async def test_schemas_are_bounded(client_for, tenant):
    """The listing keeps the bounds a model can reach (batch sizes, long texts, numbers); the server
    checks the rest (a 201-character name, an unknown field), naming the field and the rule."""
    async with client_for(tenant) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        refused = await client.call_tool("upsert_entities", {"entities": [{"name": "x" * 201, "type": "t"}]})
        unknown = await client.call_tool("upsert_entities", {"entities": [{"name": "x", "type": "t", "colour": 1}]})
    schema = tools["upsert_entities"].input_schema
    assert schema["properties"]["entities"]["maxItems"] == 100
    entity = schema["$defs"]["EntityIn"]
    assert entity["properties"]["observations"]["items"]["maxLength"] == 4000
    assert tools["neighbors"].input_schema["properties"]["depth"]["maximum"] == 5
    assert refused.is_error and "entities.0.name: String should have at most 200 characters" in text(refused)
    assert unknown.is_error and "entities.0.colour" in text(unknown)


def test_get_mcp_is_refused_and_clients_of_both_eras_do_without_it(server):
    """GET /mcp would open an event stream that never ends; this server never pushes, so it answers
    405 (the transport allows it). The test above shows both eras' clients work with that."""
    headers = {"Authorization": f"Bearer {server.token('anyone')}", "Accept": "text/event-stream"}
    got = httpx2.get(server.url, headers=headers, timeout=5)
    assert got.status_code == 405 and got.headers["allow"] == "POST"
