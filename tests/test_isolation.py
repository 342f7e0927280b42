"""A tenant never sees, reaches or links another tenant's entities, by name or by id."""

from __future__ import annotations

from tests.support.client import error_code, ok, relate, upsert


async def test_second_tenant_cannot_see_or_reach_the_first(client_for, tenant):
    other = tenant + "-other"
    async with client_for(tenant) as a:
        made = await upsert(
            a,
            [
                {"name": "Secret plan", "type": "plan", "observations": ["launch on Tuesday"]},
                {"name": "Team A", "type": "team"},
            ],
        )
        secret_id = made["results"][0]["id"]
        await relate(a, [{"from": "Team A", "to": "Secret plan", "type": "owns"}])

    async with client_for(other) as b:
        assert error_code(await b.call_tool("get_entity", {"name": "Secret plan"})) == "not_found"
        assert error_code(await b.call_tool("get_entity", {"name": "secret plan"})) == "not_found"
        assert error_code(await b.call_tool("get_entity", {"id": secret_id})) == "not_found"
        assert error_code(await b.call_tool("neighbors", {"entity": secret_id})) == "not_found"
        assert error_code(await b.call_tool("neighbors", {"entity": "Team A"})) == "not_found"

        await upsert(b, [{"name": "Team B", "type": "team"}])
        linked = await b.call_tool(
            "connect_entities", {"relations": [{"from": "Team B", "to": secret_id, "type": "steals"}]}
        )
        assert error_code(linked) == "not_found"
        # The same name in B is B's own entity, not A's.
        mine = await upsert(b, [{"name": "Secret plan", "type": "decoy"}])
        assert mine["results"][0]["status"] == "created" and mine["results"][0]["id"] != secret_id

    async with client_for(tenant) as a:
        got = ok(await a.call_tool("get_entity", {"id": secret_id}))
        assert got["type"] == "plan" and got["observations"] == ["launch on Tuesday"]
        assert [r["from"] for r in got["relations"]] == ["Team A"]


async def test_every_native_tool_keeps_tenants_apart(server, client_for, tenant):
    """Tenant B uses tenant A's ids, names and cursors with every tool; A's data never moves."""
    other = tenant + "-b"
    async with client_for(tenant) as a:
        made = await upsert(
            a, [{"name": f"A{i}", "type": "secret", "observations": [f"fact {i}"], "area": "hidden"} for i in range(6)]
        )
        ids = [r["id"] for r in made["results"]]
        rel = await relate(a, [{"from": "A0", "to": "A1", "type": "knows"}])
        rel_id = rel["results"][0]["relation"]["id"]
        for i in range(3):
            ok(await a.call_tool("append_observations", {"items": [{"entity": "A0", "observations": [f"x{i}"]}]}))
        history_cursor = ok(await a.call_tool("entity_history", {"id": ids[0], "limit": 1}))["next_cursor"]
        find_cursor = ok(await a.call_tool("find_entities", {"limit": 2}))["next_cursor"]
        before = ok(await a.call_tool("get_entity", {"id": ids[0], "include_history": True}))

    not_found = {
        "get_entity": [{"id": ids[0]}, {"name": "A0"}, {"name": "a0"}],
        "update_entity": [{"id": ids[0], "changes": {"type": "stolen"}}, {"name": "A0", "changes": {"name": "Mine"}}],
        "remove_entities": [{"entities": [ids[0]]}, {"entities": ["A0"]}],
        "append_observations": [{"items": [{"entity": ids[0], "observations": ["planted"]}]}],
        "remove_observations": [{"items": [{"entity": "A0", "observations": ["fact 0"]}]}],
        "entity_history": [{"id": ids[0]}, {"name": "A0"}],
        "connect_entities": [{"relations": [{"from": ids[0], "to": ids[1], "type": "knows"}]}],
        "neighbors": [{"entity": ids[0]}, {"entity": "A0"}],
        "relation_chain": [{"entity": ids[0], "relation_type": "knows"}],
        "shortest_path": [{"from": ids[0], "to": ids[1]}],
        "subgraph": [{"entities": [ids[0]]}],
        "restore_entities": [{"ids": [ids[0]]}],
    }
    async with client_for(other) as b, server.at("memory").client(other) as m:
        await upsert(b, [{"name": "B0", "type": "mine"}])
        for tool, cases in not_found.items():
            for args in cases:
                assert error_code(await b.call_tool(tool, args)) == "not_found", (tool, args)
        linked = await b.call_tool("connect_entities", {"relations": [{"from": "B0", "to": ids[0], "type": "steals"}]})
        assert error_code(linked) == "not_found"
        gone = ok(
            await b.call_tool(
                "disconnect_entities", {"ids": [rel_id], "relations": [{"from": "A0", "to": "A1", "type": "knows"}]}
            )
        )
        assert gone == {"removed": [], "not_found": 2}
        listed = ok(await b.call_tool("find_entities", {"text_contains": "fact"}))
        assert listed == {"entities": [], "total": 0, "next_cursor": None}
        assert error_code(await b.call_tool("find_entities", {"limit": 2, "cursor": find_cursor})) == "invalid"
        assert error_code(await b.call_tool("entity_history", {"name": "B0", "cursor": history_cursor})) == "invalid"
        stats = ok(await b.call_tool("graph_stats", {}))
        assert (stats["entities"], stats["relations"], stats["observations"]) == (1, 0, 0)
        assert ok(await b.call_tool("hierarchy", {}))["total"] == 1
        # Cypher reads the caller's graph only: no query names a graph.
        seen = ok(
            await b.call_tool("query_graph", {"query": "MATCH (n) OPTIONAL MATCH (n)-[r]->(m) RETURN n.name, r, m"})
        )
        assert seen["rows"] == [["B0", None, None]]
        for tool, args in [("search_nodes", {"query": "fact"}), ("open_nodes", {"names": ["A0"]}), ("read_graph", {})]:
            result = ok(await m.call_tool(tool, args))
            assert "A0" not in str(result) and "fact" not in str(result), tool
        assert (
            error_code(
                await m.call_tool("add_observations", {"observations": [{"entityName": "A0", "contents": ["planted"]}]})
            )
            == "not_found"
        )
        ok(await m.call_tool("delete_entities", {"entityNames": ["A0", "A1"]}))
        ok(await m.call_tool("delete_observations", {"deletions": [{"entityName": "A0", "observations": ["fact 0"]}]}))
        ok(await m.call_tool("delete_relations", {"relations": [{"from": "A0", "to": "A1", "relationType": "knows"}]}))

    async with client_for(tenant) as a:
        after = ok(await a.call_tool("get_entity", {"id": ids[0], "include_history": True}))
        assert after == before
        assert ok(await a.call_tool("graph_stats", {}))["relations"] == 1
