"""The native tool surface beyond the first round trip: edits, soft delete, history, listings, walks."""

from __future__ import annotations

import asyncio
import itertools

import orjson

from tests.support.client import error_code, ok, relate, upsert


async def _seed(c, names: list[str], type_: str = "thing", **extra) -> dict[str, str]:
    made = await upsert(c, [{"name": n, "type": type_, **extra} for n in names])
    return {r["name"]: r["id"] for r in made["results"]}


async def test_update_entity_fields_versions_and_conflicts(client_for, tenant):
    async with client_for(tenant) as c:
        ids = await _seed(c, ["Ada", "Bob"])
        await upsert(
            c,
            [
                {
                    "name": "Ada",
                    "type": "person",
                    "area": "science",
                    "certainty": 50,
                    "properties": {"a": 1, "b": 2},
                }
            ],
        )
        got = ok(await c.call_tool("get_entity", {"name": "Ada"}))
        assert got["version"] == 2

        changed = ok(
            await c.call_tool(
                "update_entity",
                {
                    "name": "Ada",
                    "expected_version": 2,
                    "changes": {
                        "name": "Ada Lovelace",
                        "type": "mathematician",
                        "properties": {"b": 3, "c": 4},
                        "unset_properties": ["a"],
                        "clear": ["area", "certainty"],
                    },
                },
            )
        )
        assert changed["changed"] == [{"id": ids["Ada"], "name": "Ada Lovelace", "version": 3}]
        got = ok(await c.call_tool("get_entity", {"id": ids["Ada"]}))
        assert (got["name"], got["type"], got["area"], got["certainty"]) == (
            "Ada Lovelace",
            "mathematician",
            None,
            None,
        )
        assert got["properties"] == {"b": 3, "c": 4}

        stale = await c.call_tool("update_entity", {"id": ids["Ada"], "expected_version": 2, "changes": {"type": "x"}})
        assert error_code(stale) == "conflict" and '"current_version":3' in stale.content[0].text
        taken = await c.call_tool("update_entity", {"id": ids["Ada"], "changes": {"name": "Bob"}})
        assert error_code(taken) == "conflict"
        same = ok(await c.call_tool("update_entity", {"id": ids["Ada"], "changes": {"type": "mathematician"}}))
        assert same["changed"] == [] and same["unchanged"] == [ids["Ada"]]
        assert ok(await c.call_tool("get_entity", {"id": ids["Ada"]}))["version"] == 3  # failures changed nothing

        history = ok(await c.call_tool("entity_history", {"id": ids["Ada"]}))["entries"]
        update = next(h for h in history if h["action"] == "updated" and "name" in h["changes"])
        assert update["changes"]["name"] == ["Ada", "Ada Lovelace"]
        assert update["changes"]["type"] == ["person", "mathematician"]
        assert update["actor"] == "dev-user"


async def test_concurrent_updates_with_expected_version_one_wins(client_for, tenant):
    async with client_for(tenant) as c:
        await _seed(c, ["Counter"])

    async def bump(i: int):
        async with client_for(tenant) as c:
            return await c.call_tool(
                "update_entity", {"name": "Counter", "expected_version": 1, "changes": {"description": f"writer {i}"}}
            )

    results = await asyncio.gather(*(bump(i) for i in range(6)))
    assert sum(not r.is_error for r in results) == 1
    assert all(error_code(r) == "conflict" for r in results if r.is_error)


async def test_remove_hides_everywhere_and_restore_brings_back(client_for, tenant):
    async with client_for(tenant) as c:
        ids = await _seed(c, ["Hub", "Spoke", "Far"])
        ok(await c.call_tool("append_observations", {"items": [{"entity": "Spoke", "observations": ["round"]}]}))
        await relate(
            c,
            [
                {"from": "Hub", "to": "Spoke", "type": "has"},
                {"from": "Spoke", "to": "Far", "type": "reaches"},
            ],
        )
        removed = ok(await c.call_tool("remove_entities", {"entities": ["Spoke"]}))
        assert [x["id"] for x in removed["changed"]] == [ids["Spoke"]]

        assert error_code(await c.call_tool("get_entity", {"name": "Spoke"})) == "not_found"
        assert ok(await c.call_tool("get_entity", {"name": "Hub"}))["relations"] == []
        assert ok(await c.call_tool("neighbors", {"entity": "Hub", "depth": 3}))["neighbors"] == []
        listed = ok(await c.call_tool("find_entities", {"sort": "name"}))
        assert [e["name"] for e in listed["entities"]] == ["Far", "Hub"] and listed["total"] == 2
        assert ok(await c.call_tool("shortest_path", {"from": "Hub", "to": "Far"}))["found"] is False
        stats = ok(await c.call_tool("graph_stats", {}))
        assert (stats["entities"], stats["deleted_entities"], stats["relations"]) == (2, 1, 0)

        restored = ok(await c.call_tool("restore_entities", {"ids": [ids["Spoke"]]}))
        assert restored["changed"][0]["name"] == "Spoke"
        spoke = ok(await c.call_tool("get_entity", {"name": "Spoke"}))
        assert spoke["observations"] == ["round"]
        assert {(r["from"], r["type"], r["to"]) for r in spoke["relations"]} == {
            ("Hub", "has", "Spoke"),
            ("Spoke", "reaches", "Far"),
        }
        path = ok(await c.call_tool("shortest_path", {"from": "Hub", "to": "Far"}))
        assert path["found"] and path["length"] == 2

        # A name taken while deleted blocks the restore, which then changes nothing.
        ok(await c.call_tool("remove_entities", {"entities": [ids["Spoke"]]}))
        await _seed(c, ["Spoke"])
        assert error_code(await c.call_tool("restore_entities", {"ids": [ids["Spoke"]]})) == "conflict"
        history = ok(await c.call_tool("entity_history", {"id": ids["Spoke"], "limit": 50}))["entries"]
        assert [h["action"] for h in history][:3] == ["deleted", "restored", "deleted"]


async def test_observations_add_remove_and_unknown_entity_saves_nothing(client_for, tenant):
    async with client_for(tenant) as c:
        await _seed(c, ["Note"])
        added = ok(
            await c.call_tool(
                "append_observations", {"items": [{"entity": "note", "observations": ["one", "two", "one"]}]}
            )
        )
        assert added["results"][0]["observations"] == ["one", "two"] and added["results"][0]["version"] == 2
        failed = await c.call_tool(
            "append_observations",
            {"items": [{"entity": "Note", "observations": ["three"]}, {"entity": "Missing", "observations": ["x"]}]},
        )
        assert error_code(failed) == "not_found"
        removed = ok(
            await c.call_tool(
                "remove_observations", {"items": [{"entity": "Note", "observations": ["one", "never stored"]}]}
            )
        )
        assert removed["results"][0]["observations"] == ["one"]
        got = ok(await c.call_tool("get_entity", {"name": "Note", "include_history": True}))
        assert got["observations"] == ["two"] and got["version"] == 3
        assert [h["action"] for h in got["history"]][:2] == ["observations_removed", "observations_added"]


async def test_many_observations_are_capped_with_a_count(client_for, tenant):
    async with client_for(tenant) as c:
        facts = [f"fact {i:03d}" for i in range(100)]
        await upsert(c, [{"name": "Busy", "type": "t", "observations": facts}])
        got = ok(await c.call_tool("get_entity", {"name": "Busy", "max_observations": 10}))
        assert got["observations"] == facts[:10] and got["observations_total"] == 100


async def test_history_pages_and_cursors_cannot_be_forged_or_moved(client_for, tenant):
    async with client_for(tenant) as c:
        ids = await _seed(c, ["Log"])
        for i in range(7):
            ok(await c.call_tool("append_observations", {"items": [{"entity": "Log", "observations": [f"e{i}"]}]}))
        seen, cursor = [], None
        while True:
            page = ok(
                await c.call_tool(
                    "entity_history", {"name": "Log", "limit": 3, **({"cursor": cursor} if cursor else {})}
                )
            )
            seen += [h["id"] for h in page["entries"]]
            cursor = page["next_cursor"]
            if not cursor:
                break
        assert len(seen) == 8 and seen == sorted(seen, reverse=True)

        first = ok(await c.call_tool("entity_history", {"name": "Log", "limit": 3}))["next_cursor"]
        body, mac = first.split(".")
        tampered = body[:-2] + ("AA" if body[-2:] != "AA" else "BB") + "." + mac
        assert error_code(await c.call_tool("entity_history", {"name": "Log", "cursor": tampered})) == "invalid"
        assert error_code(await c.call_tool("find_entities", {"cursor": first})) == "invalid"  # another listing

    async with client_for(tenant + "-b") as other:
        await _seed(other, ["Log"])
        moved = await other.call_tool("entity_history", {"name": "Log", "cursor": first})
        assert error_code(moved) == "invalid"
        assert error_code(await other.call_tool("entity_history", {"id": ids["Log"]})) == "not_found"


async def test_find_entities_filters_sorts_and_pages(client_for, tenant):
    async with client_for(tenant) as c:
        await upsert(
            c,
            [
                {
                    "name": f"Item {i:02d}",
                    "type": "even" if i % 2 == 0 else "odd",
                    "certainty": i * 4,
                    "area": "stock",
                    "topic": "a" if i < 10 else "b",
                    "observations": [f"serial 100_{i}%"],
                }
                for i in range(25)
            ],
        )
        evens = ok(await c.call_tool("find_entities", {"types": ["even"], "sort": "name", "limit": 50}))
        assert evens["total"] == 13 and [e["name"] for e in evens["entities"]][:2] == ["Item 00", "Item 02"]
        sure = ok(await c.call_tool("find_entities", {"certainty_min": 80, "sort": "certainty"}))
        assert [e["certainty"] for e in sure["entities"]] == [96, 92, 88, 84, 80]
        text = ok(await c.call_tool("find_entities", {"text_contains": "100_7%"}))
        assert [e["name"] for e in text["entities"]] == ["Item 07"]  # % and _ are literal
        named = ok(await c.call_tool("find_entities", {"name_contains": "ITEM 1", "topic": "a"}))
        assert named["total"] == 0
        named = ok(await c.call_tool("find_entities", {"name_contains": "item 1", "topic": "b"}))
        assert named["total"] == 10

        for sort in ("name", "recent", "certainty"):
            names, cursor = [], None
            while True:
                args = {"sort": sort, "limit": 7, **({"cursor": cursor} if cursor else {})}
                page = ok(await c.call_tool("find_entities", args))
                assert page["total"] == 25
                names += [e["name"] for e in page["entities"]]
                if not (cursor := page["next_cursor"]):
                    break
            assert sorted(names) == [f"Item {i:02d}" for i in range(25)], sort
        first = ok(await c.call_tool("find_entities", {"sort": "name", "limit": 5}))["next_cursor"]
        other_filters = await c.call_tool(
            "find_entities", {"sort": "name", "limit": 5, "types": ["odd"], "cursor": first}
        )
        assert error_code(other_filters) == "invalid"


async def test_paths_chains_subgraphs(client_for, tenant):
    async with client_for(tenant) as c:
        await _seed(c, ["Calculus", "Algebra", "Arithmetic", "Counting", "Logic", "Island"])
        await relate(
            c,
            [
                {"from": "Calculus", "to": "Algebra", "type": "requires"},
                {"from": "Algebra", "to": "Arithmetic", "type": "requires"},
                {"from": "Arithmetic", "to": "Counting", "type": "requires"},
                {"from": "Logic", "to": "Counting", "type": "uses"},
                {"from": "Calculus", "to": "Logic", "type": "uses"},
            ],
        )
        path = ok(await c.call_tool("shortest_path", {"from": "Calculus", "to": "Counting"}))
        assert path["found"] and path["length"] == 2
        assert [n["name"] for n in path["nodes"]] == ["Calculus", "Logic", "Counting"]
        assert [(r["from"], r["to"]) for r in path["relations"]] == [("Calculus", "Logic"), ("Logic", "Counting")]
        typed = ok(
            await c.call_tool("shortest_path", {"from": "Calculus", "to": "Counting", "relation_types": ["requires"]})
        )
        assert typed["length"] == 3
        backwards = ok(await c.call_tool("shortest_path", {"from": "Counting", "to": "Calculus", "direction": "out"}))
        assert backwards["found"] is False
        reverse = ok(await c.call_tool("shortest_path", {"from": "Counting", "to": "Calculus", "direction": "in"}))
        assert reverse["length"] == 2 and reverse["relations"][0]["to"] == "Counting"
        short = ok(await c.call_tool("shortest_path", {"from": "Calculus", "to": "Counting", "max_depth": 1}))
        assert short["found"] is False
        assert ok(await c.call_tool("shortest_path", {"from": "Island", "to": "Logic"}))["found"] is False
        same = ok(await c.call_tool("shortest_path", {"from": "Logic", "to": "logic"}))
        assert same["found"] and same["length"] == 0 and [n["name"] for n in same["nodes"]] == ["Logic"]

        chain = ok(await c.call_tool("relation_chain", {"entity": "Calculus", "relation_type": "requires"}))
        assert [(n["entity"]["name"], n["depth"]) for n in chain["neighbors"]] == [
            ("Algebra", 1),
            ("Arithmetic", 2),
            ("Counting", 3),
        ]
        up = ok(
            await c.call_tool("relation_chain", {"entity": "Counting", "relation_type": "requires", "direction": "in"})
        )
        assert [n["entity"]["name"] for n in up["neighbors"]] == ["Arithmetic", "Algebra", "Calculus"]

        sub = ok(await c.call_tool("subgraph", {"entities": ["Algebra", "Logic"], "depth": 1}))
        assert {e["name"] for e in sub["entities"]} == {"Algebra", "Logic", "Calculus", "Arithmetic", "Counting"}
        assert len(sub["relations"]) == 5 and sub["truncated"] is False
        small = ok(
            await c.call_tool("subgraph", {"entities": ["Calculus"], "depth": 3, "max_nodes": 2, "max_relations": 1})
        )
        assert len(small["entities"]) == 2 and len(small["relations"]) == 1 and small["truncated"] is True


async def test_neighbors_to_depth_five(client_for, tenant):
    async with client_for(tenant) as c:
        names = [f"n{i}" for i in range(8)]
        await _seed(c, names)
        await relate(c, [{"from": a, "to": b, "type": "next"} for a, b in itertools.pairwise(names)])
        walk = ok(await c.call_tool("neighbors", {"entity": "n0", "depth": 5}))
        assert [(n["entity"]["name"], n["depth"]) for n in walk["neighbors"]] == [(f"n{i}", i) for i in range(1, 6)]


async def test_hierarchy_stats_status(client_for, tenant):
    async with client_for(tenant) as c:
        await upsert(
            c,
            [
                {"name": "a1", "type": "t", "area": "Science", "topic": "Physics", "subtopic": "Optics"},
                {"name": "a2", "type": "t", "area": "Science", "topic": "Physics"},
                {"name": "a3", "type": "u", "area": "Science", "topic": "Biology"},
                {"name": "a4", "type": "u"},
            ],
        )
        await relate(c, [{"from": "a1", "to": "a2", "type": "near"}, {"from": "a1", "to": "a3", "type": "near"}])
        tree = ok(await c.call_tool("hierarchy", {}))
        assert tree["total"] == 4
        science = next(a for a in tree["areas"] if a["name"] == "Science")
        assert science["count"] == 3
        physics = next(t for t in science["children"] if t["name"] == "Physics")
        assert physics["count"] == 2 and {(s["name"], s["count"]) for s in physics["children"]} == {
            ("Optics", 1),
            (None, 1),
        }
        assert next(a for a in tree["areas"] if a["name"] is None)["count"] == 1

        stats = ok(await c.call_tool("graph_stats", {}))
        assert (stats["entities"], stats["relations"]) == (4, 2)
        assert {(t["name"], t["count"]) for t in stats["entity_types"]} == {("t", 2), ("u", 2)}
        assert stats["relation_types"] == [{"name": "near", "count": 2}]
        assert stats["most_connected"][0]["name"] == "a1" and stats["most_connected"][0]["degree"] == 2
        assert stats["recent_activity"][0]["action"] == "related"

        status = ok(await c.call_tool("server_status", {}))
        assert status["database"] == "ok" and status["graph"] == "ok"
        assert {"get_entity", "upsert_entities", "server_status"} <= set(status["tools"])
        assert "create_entities" not in status["tools"]  # the server-memory tools are at /mcp/memory


async def test_resources_and_prompt(client_for, tenant):
    async with client_for(tenant) as c:
        await _seed(c, ["Zed"], observations=["last letter"])
        graph = await c.read_resource("memory://knowledge-graph")
        data = orjson.loads(graph.contents[0].text)
        assert data["entities"] == [{"name": "Zed", "entityType": "thing", "observations": ["last letter"]}]
        one = orjson.loads((await c.read_resource("memory://entities/Zed")).contents[0].text)
        assert one["observations"] == ["last letter"]
        templates = await c.list_resource_templates()
        assert "memory://entities/{name}" in [t.uri_template for t in templates.resource_templates]
        prompt = await c.get_prompt("use_memory")
        assert "upsert_entities" in prompt.messages[0].content.text
