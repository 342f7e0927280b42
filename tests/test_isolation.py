"""A tenant never sees, reaches or links another tenant's entities, by name or by id."""

from __future__ import annotations

from tests.conftest import error_code, ok


async def test_second_tenant_cannot_see_or_reach_the_first(client_for, tenant):
    other = tenant + "-other"
    async with client_for(tenant) as a:
        made = ok(
            await a.call_tool(
                "upsert_entities",
                {
                    "entities": [
                        {"name": "Secret plan", "type": "plan", "observations": ["launch on Tuesday"]},
                        {"name": "Team A", "type": "team"},
                    ]
                },
            )
        )
        secret_id = made["results"][0]["id"]
        ok(
            await a.call_tool(
                "connect_entities", {"relations": [{"from": "Team A", "to": "Secret plan", "type": "owns"}]}
            )
        )

    async with client_for(other) as b:
        assert error_code(await b.call_tool("get_entity", {"name": "Secret plan"})) == "not_found"
        assert error_code(await b.call_tool("get_entity", {"name": "secret plan"})) == "not_found"
        assert error_code(await b.call_tool("get_entity", {"id": secret_id})) == "not_found"
        assert error_code(await b.call_tool("neighbors", {"entity": secret_id})) == "not_found"
        assert error_code(await b.call_tool("neighbors", {"entity": "Team A"})) == "not_found"

        ok(await b.call_tool("upsert_entities", {"entities": [{"name": "Team B", "type": "team"}]}))
        linked = await b.call_tool(
            "connect_entities", {"relations": [{"from": "Team B", "to": secret_id, "type": "steals"}]}
        )
        assert error_code(linked) == "not_found"
        # The same name in B is B's own entity, not A's.
        mine = ok(await b.call_tool("upsert_entities", {"entities": [{"name": "Secret plan", "type": "decoy"}]}))
        assert mine["results"][0]["status"] == "created" and mine["results"][0]["id"] != secret_id

    async with client_for(tenant) as a:
        got = ok(await a.call_tool("get_entity", {"id": secret_id}))
        assert got["type"] == "plan" and got["observations"] == ["launch on Tuesday"]
        assert [r["from"] for r in got["relations"]] == ["Team A"]
