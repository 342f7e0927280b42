"""The first tools, end to end: upsert → get → connect → neighbors, and their error cases."""

from __future__ import annotations

import asyncio
import itertools

from tests.support.client import error_code, ok, relate, upsert

HOSTILE = 'O\'Brien "quoted" $$ }) MATCH (n) DETACH DELETE n // \\ RETURN 1; DROP TABLE entities; -- Zoë 🧠'


async def test_round_trip(client_for, tenant):
    async with client_for(tenant) as c:
        up = await upsert(
            c,
            [
                {
                    "name": "Ada Lovelace",
                    "type": "person",
                    "observations": ["wrote the first program", "born 1815"],
                    "area": "computing",
                    "certainty": 90,
                    "properties": {"born": 1815},
                },
                {"name": "Analytical Engine", "type": "machine", "description": "Babbage's design"},
                {"name": "Charles Babbage", "type": "person"},
            ],
        )
        assert [r["status"] for r in up["results"]] == ["created"] * 3
        ada = up["results"][0]["id"]

        rel = await relate(
            c,
            [
                {
                    "from": "Ada Lovelace",
                    "to": "Analytical Engine",
                    "type": "wrote programs for",
                    "strength": 0.9,
                },
                {"from": "Charles Babbage", "to": "Analytical Engine", "type": "designed"},
            ],
        )
        assert [r["status"] for r in rel["results"]] == ["created", "created"]

        got = ok(await c.call_tool("get_entity", {"id": ada}))
        assert got["name"] == "Ada Lovelace" and got["type"] == "person"
        assert got["observations"] == ["wrote the first program", "born 1815"]
        assert got["properties"] == {"born": 1815} and got["certainty"] == 90 and got["area"] == "computing"
        assert [(r["from"], r["type"], r["to"], r["strength"]) for r in got["relations"]] == [
            ("Ada Lovelace", "wrote programs for", "Analytical Engine", 0.9)
        ]

        near = ok(await c.call_tool("neighbors", {"entity": "Ada Lovelace", "depth": 2}))
        assert near["start"]["id"] == ada
        assert {(n["entity"]["name"], n["depth"]) for n in near["neighbors"]} == {
            ("Analytical Engine", 1),
            ("Charles Babbage", 2),
        }
        babbage = next(n for n in near["neighbors"] if n["entity"]["name"] == "Charles Babbage")
        assert (babbage["via"]["from"], babbage["via"]["type"]) == ("Charles Babbage", "designed")

        only_out = ok(await c.call_tool("neighbors", {"entity": "Ada Lovelace", "depth": 2, "direction": "out"}))
        assert [n["entity"]["name"] for n in only_out["neighbors"]] == ["Analytical Engine"]
        typed = ok(await c.call_tool("neighbors", {"entity": "Analytical Engine", "relation_types": ["designed"]}))
        assert [n["entity"]["name"] for n in typed["neighbors"]] == ["Charles Babbage"]


async def test_neighbors_walks_three_levels_without_repeating_cycles(client_for, tenant):
    async with client_for(tenant) as c:
        names = ["a", "b", "c", "d", "e"]
        await upsert(c, [{"name": n, "type": "node"} for n in names])
        chain = [{"from": x, "to": y, "type": "next"} for x, y in itertools.pairwise(names)]
        await relate(c, [*chain, {"from": "c", "to": "a", "type": "back"}])
        walk = ok(await c.call_tool("neighbors", {"entity": "a", "depth": 3, "direction": "out"}))
        assert [(n["entity"]["name"], n["depth"]) for n in walk["neighbors"]] == [("b", 1), ("c", 2), ("d", 3)]
        both = ok(await c.call_tool("neighbors", {"entity": "a", "depth": 3}))
        depths = {n["entity"]["name"]: n["depth"] for n in both["neighbors"]}
        assert depths == {"b": 1, "c": 1, "d": 2, "e": 3}
        capped = ok(await c.call_tool("neighbors", {"entity": "a", "depth": 3, "limit": 2}))
        assert len(capped["neighbors"]) == 2 and capped["truncated"] is True


async def test_hostile_text_round_trips_unchanged(client_for, tenant):
    async with client_for(tenant) as c:
        await upsert(
            c,
            [
                {
                    "name": HOSTILE,
                    "type": HOSTILE,
                    "description": HOSTILE,
                    "observations": [HOSTILE],
                    "properties": {HOSTILE: HOSTILE},
                },
                {"name": "plain", "type": "x"},
            ],
        )
        await relate(c, [{"from": HOSTILE, "to": "plain", "type": HOSTILE, "notes": HOSTILE}])
        got = ok(await c.call_tool("get_entity", {"name": HOSTILE}))
        assert got["name"] == got["type"] == got["description"] == HOSTILE
        assert got["observations"] == [HOSTILE] and got["properties"] == {HOSTILE: HOSTILE}
        assert got["relations"][0]["type"] == got["relations"][0]["notes"] == HOSTILE
        walk = ok(await c.call_tool("neighbors", {"entity": "plain", "relation_types": [HOSTILE]}))
        assert [n["entity"]["name"] for n in walk["neighbors"]] == [HOSTILE]


async def test_upsert_merges_skips_and_refuses(client_for, tenant):
    async with client_for(tenant) as c:
        first = await upsert(
            c,
            [
                {"name": "Acme", "type": "company", "observations": ["makes anvils"]},
                {"name": "Acme", "type": "company", "observations": ["makes anvils", "founded 1920"]},
            ],
        )
        assert [r["status"] for r in first["results"]] == ["created"]  # in-batch duplicates merge
        assert first["results"][0]["observations_added"] == 2

        merged = await upsert(
            c, [{"name": "Acme", "type": "corporation", "observations": ["makes anvils", "sells rockets"]}]
        )
        assert merged["results"][0]["status"] == "updated" and merged["results"][0]["version"] == 2
        assert merged["results"][0]["observations_added"] == 1

        same = await upsert(c, [{"name": "Acme", "type": "corporation"}])
        assert same["results"][0]["status"] == "unchanged" and same["results"][0]["version"] == 2
        skipped = ok(
            await c.call_tool("upsert_entities", {"entities": [{"name": "Acme", "type": "x"}], "on_existing": "skip"})
        )
        assert skipped["results"][0]["status"] == "skipped"

        refused = await c.call_tool(
            "upsert_entities",
            {"entities": [{"name": "New one", "type": "x"}, {"name": "Acme", "type": "x"}], "on_existing": "error"},
        )
        assert error_code(refused) == "conflict"
        assert error_code(await c.call_tool("get_entity", {"name": "New one"})) == "not_found"  # nothing landed

        got = ok(await c.call_tool("get_entity", {"name": "Acme"}))
        assert got["type"] == "corporation"
        assert got["observations"] == ["makes anvils", "founded 1920", "sells rockets"]


async def test_lookup_is_exact_then_case_insensitive_and_reports_ambiguity(client_for, tenant):
    async with client_for(tenant) as c:
        await upsert(
            c,
            [
                {"name": "Mercury", "type": "planet"},
                {"name": "MERCURY", "type": "element"},
                {"name": "Venus", "type": "planet"},
            ],
        )
        assert ok(await c.call_tool("get_entity", {"name": "MERCURY"}))["type"] == "element"
        assert ok(await c.call_tool("get_entity", {"name": "venus"}))["name"] == "Venus"
        ambiguous = await c.call_tool("get_entity", {"name": "mercury"})
        assert error_code(ambiguous) == "ambiguous"
        assert '"MERCURY"' in ambiguous.content[0].text and '"Mercury"' in ambiguous.content[0].text


async def test_connect_reports_duplicates_and_missing_ends(client_for, tenant):
    async with client_for(tenant) as c:
        await upsert(c, [{"name": "x", "type": "t"}, {"name": "y", "type": "t"}])
        rel = {"from": "x", "to": "y", "type": "likes"}
        first = await relate(c, [rel, rel])
        assert [r["status"] for r in first["results"]] == ["created", "exists"]
        assert first["results"][0]["relation"]["id"] == first["results"][1]["relation"]["id"]
        again = await relate(c, [rel])
        assert again["results"][0]["status"] == "exists"
        assert again["results"][0]["relation"]["id"] == first["results"][0]["relation"]["id"]

        missing = await c.call_tool(
            "connect_entities",
            {"relations": [{"from": "x", "to": "y", "type": "also"}, {"from": "x", "to": "nowhere", "type": "t"}]},
        )
        assert error_code(missing) == "not_found"
        got = ok(await c.call_tool("get_entity", {"name": "x"}))
        assert [r["type"] for r in got["relations"]] == ["likes"]  # the failed batch left nothing


async def test_invalid_input_is_refused_with_the_field_named(client_for, tenant):
    async with client_for(tenant) as c:
        cases = [
            ("upsert_entities", {"entities": []}, "entities"),
            ("upsert_entities", {"entities": [{"name": "", "type": "t"}]}, "name"),
            ("upsert_entities", {"entities": [{"name": "n" * 201, "type": "t"}]}, "name"),
            ("upsert_entities", {"entities": [{"name": "n", "type": "t", "certainty": 101}]}, "certainty"),
            ("upsert_entities", {"entities": [{"name": "n", "type": "t", "colour": "red"}]}, "colour"),
            ("upsert_entities", {"entities": [{"name": f"n{i}", "type": "t"} for i in range(101)]}, "entities"),
            (
                "upsert_entities",
                {"entities": [{"name": "n", "type": "t", "properties": {str(i): i for i in range(51)}}]},
                "properties",
            ),
            ("neighbors", {"entity": "n", "depth": 6}, "depth"),
            ("connect_entities", {"relations": [{"from": "a", "to": "b", "type": "t", "strength": 2}]}, "strength"),
        ]
        for tool, args, field in cases:
            result = await c.call_tool(tool, args)
            assert result.is_error, (tool, args)
            assert field in result.content[0].text, (field, result.content[0].text)
        assert error_code(await c.call_tool("get_entity", {})) == "invalid"
        assert error_code(await c.call_tool("get_entity", {"id": "a", "name": "b"})) == "invalid"
        assert error_code(await c.call_tool("get_entity", {"name": "n"})) == "not_found"  # nothing was written


async def test_concurrent_writers_lose_nothing(client_for, tenant):
    async def writer(i: int) -> None:
        async with client_for(tenant) as c:
            await upsert(c, [{"name": "Shared", "type": "topic", "observations": [f"fact {i}"]}])

    await asyncio.gather(*(writer(i) for i in range(8)))
    async with client_for(tenant) as c:
        got = ok(await c.call_tool("get_entity", {"name": "Shared"}))
    assert sorted(got["observations"]) == sorted(f"fact {i}" for i in range(8))
    assert got["version"] == 8
