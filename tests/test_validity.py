"""Facts that stop being true, and where facts came from: validity intervals, invalidation, `as_of`
and `include_invalid` reads, sources and write-time filters, through the real server and client.

Moments are fixed dates far from today (2019-2024 against a clock in 2026 or later), or "now" only
where the answer does not depend on when the test runs: no assertion depends on the wall clock.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from app.auth.principal import ADMIN, READ, WRITE
from tests.support.client import error_code, ok, relate, upsert
from tests.support.server import Server, serve
from tests.support.transfer import export, lines_of, summary

SCOPES = (READ, WRITE, ADMIN)
CLIENT = "engram-cli"  # the client id of the test tokens: every write's default source
Y2019, Y2020, Y2021, Y2022, Y2023, Y2024 = (f"{y}-01-01T00:00:00+00:00" for y in range(2019, 2025))


@pytest.fixture(scope="module")
def vserver(db_settings) -> Iterator[Server]:
    """Every tool set, each at its endpoint, searching by words only."""
    with serve(db_settings, ENGRAM_TOOL_SETS="native,memory,neo4j", ENGRAM_EMBEDDING_PROVIDER="none") as running:
        yield running


async def _career(c: Any) -> None:
    """Ada worked at Acme from 2019 to 2023 (ended with a reason), then at Initech; she knows Bob."""
    await upsert(
        c,
        [
            {"name": "Ada", "type": "person", "observations": ["born in London"]},
            {"name": "Acme", "type": "org"},
            {"name": "Initech", "type": "org"},
            {"name": "Bob", "type": "person"},
        ],
    )
    ok(
        await c.call_tool(
            "append_observations",
            {"items": [{"entity": "Ada", "observations": ["lives in Paris"], "valid_from": Y2019, "source": "cv"}]},
        )
    )
    await relate(
        c,
        [
            {"from": "Ada", "to": "Acme", "type": "works at", "valid_from": Y2019, "source": "cv"},
            {"from": "Ada", "to": "Initech", "type": "works at", "valid_from": Y2023},
            {"from": "Acme", "to": "Bob", "type": "employs"},
        ],
    )
    ended = ok(
        await c.call_tool(
            "invalidate_relations",
            {"relations": [{"from": "Ada", "to": "Acme", "type": "works at"}], "at": Y2023, "reason": "left"},
        )
    )
    assert [(r["to"], r["valid_from"][:4], r["valid_until"][:4]) for r in ended["invalidated"]] == [
        ("Acme", "2019", "2023")
    ]
    assert ended["unchanged"] == 0
    moved = ok(
        await c.call_tool(
            "invalidate_observations",
            {"items": [{"entity": "Ada", "observations": ["lives in Paris"]}], "at": Y2022, "reason": "moved"},
        )
    )
    assert moved["results"][0]["observations"] == ["lives in Paris"]


def _names(found: dict[str, Any]) -> list[str]:
    return [n["entity"]["name"] for n in found["neighbors"]]


async def test_get_entity_now_as_of_and_everything(vserver, tenant):
    async with vserver.client(tenant, SCOPES) as c:
        await _career(c)
        now = ok(await c.call_tool("get_entity", {"name": "Ada"}))
        assert now["observations"] == ["born in London"] and now["observations_total"] == 1
        assert [r["to"] for r in now["relations"]] == ["Initech"]

        then = ok(await c.call_tool("get_entity", {"name": "Ada", "as_of": "2021-06-01T00:00:00Z"}))
        assert then["observations"] == ["born in London", "lives in Paris"]
        assert [r["to"] for r in then["relations"]] == ["Acme"]  # Initech only from 2023
        before = ok(await c.call_tool("get_entity", {"name": "Ada", "as_of": "2010-01-01T00:00:00"}))
        assert before["observations"] == ["born in London"] and before["relations"] == []

        everything = ok(await c.call_tool("get_entity", {"name": "Ada", "include_invalid": True}))
        assert everything["observations_total"] == 2 and len(everything["relations"]) == 2
        paris = everything["observation_records"][1]
        assert paris["text"] == "lives in Paris" and paris["source"] == "cv"
        assert paris["valid_from"].startswith("2019-01-01") and paris["valid_until"].startswith("2022-01-01")
        acme = next(r for r in everything["relations"] if r["to"] == "Acme")
        assert acme["valid_until"].startswith("2023-01-01") and acme["source"] == "cv"


async def test_walks_paths_and_subgraphs_follow_what_held(vserver, tenant):
    async with vserver.client(tenant, SCOPES) as c:
        await _career(c)
        assert _names(ok(await c.call_tool("neighbors", {"entity": "Ada", "depth": 2}))) == ["Initech"]
        old = ok(await c.call_tool("neighbors", {"entity": "Ada", "depth": 2, "as_of": Y2021}))
        assert _names(old) == ["Acme", "Bob"] and old["neighbors"][0]["via"]["valid_until"].startswith("2023")
        every = ok(await c.call_tool("neighbors", {"entity": "Ada", "depth": 2, "include_invalid": True}))
        assert sorted(_names(every)) == ["Acme", "Bob", "Initech"]
        typed = {"entity": "Ada", "relation_types": ["works at"], "depth": 1}
        assert _names(ok(await c.call_tool("neighbors", {**typed, "as_of": Y2021}))) == ["Acme"]
        assert _names(ok(await c.call_tool("neighbors", typed))) == ["Initech"]
        chain = {"entity": "Ada", "relation_type": "works at"}
        assert _names(ok(await c.call_tool("relation_chain", {**chain, "as_of": Y2024}))) == ["Initech"]

        path = {"from": "Ada", "to": "Bob"}
        assert ok(await c.call_tool("shortest_path", path))["found"] is False
        then = ok(await c.call_tool("shortest_path", {**path, "as_of": Y2020}))
        assert [n["name"] for n in then["nodes"]] == ["Ada", "Acme", "Bob"]
        assert ok(await c.call_tool("shortest_path", {**path, "include_invalid": True}))["length"] == 2
        typed_path = {**path, "relation_types": ["works at", "employs"]}
        assert ok(await c.call_tool("shortest_path", {**typed_path, "as_of": Y2024}))["found"] is False
        assert ok(await c.call_tool("shortest_path", {**typed_path, "as_of": Y2020}))["found"] is True

        sub = ok(await c.call_tool("subgraph", {"entities": ["Ada"], "depth": 2}))
        assert [(r["from"], r["to"]) for r in sub["relations"]] == [("Ada", "Initech")]
        sub = ok(await c.call_tool("subgraph", {"entities": ["Ada"], "depth": 2, "as_of": Y2022}))
        assert sorted((r["from"], r["to"]) for r in sub["relations"]) == [("Acme", "Bob"), ("Ada", "Acme")]
        sub = ok(await c.call_tool("subgraph", {"entities": ["Ada"], "depth": 2, "include_invalid": True}))
        assert len(sub["relations"]) == 3


async def test_a_pair_with_one_ended_and_one_valid_relation_stays_joined(vserver, tenant):
    async with vserver.client(tenant, SCOPES) as c:
        await upsert(c, [{"name": n, "type": "t"} for n in ("A", "B")])
        await relate(c, [{"from": "A", "to": "B", "type": "old"}, {"from": "A", "to": "B", "type": "new"}])
        ok(await c.call_tool("invalidate_relations", {"relations": [{"from": "A", "to": "B", "type": "old"}]}))
        for direction in ("out", "both"):
            near = ok(await c.call_tool("neighbors", {"entity": "A", "depth": 1, "direction": direction}))
            assert [(n["entity"]["name"], n["via"]["type"]) for n in near["neighbors"]] == [("B", "new")]
        ok(await c.call_tool("invalidate_relations", {"relations": [{"from": "A", "to": "B", "type": "new"}]}))
        assert ok(await c.call_tool("neighbors", {"entity": "A", "depth": 1}))["neighbors"] == []
        assert ok(await c.call_tool("shortest_path", {"from": "A", "to": "B"}))["found"] is False
        assert ok(await c.call_tool("shortest_path", {"from": "B", "to": "A", "include_invalid": True}))["found"]
        # Invalidating again changes nothing; connecting again makes the relation hold anew.
        again = ok(await c.call_tool("invalidate_relations", {"relations": [{"from": "A", "to": "B", "type": "new"}]}))
        assert again == {"invalidated": [], "unchanged": 1}
        back = await relate(c, [{"from": "A", "to": "B", "type": "new"}])
        assert back["results"][0]["status"] == "created" and back["results"][0]["relation"]["valid_until"] is None
        assert _names(ok(await c.call_tool("neighbors", {"entity": "A", "depth": 1}))) == ["B"]


async def test_invalidation_is_recorded_in_history_and_audit(vserver, tenant):
    async with vserver.client(tenant, SCOPES) as c:
        await _career(c)
        entries = ok(await c.call_tool("entity_history", {"name": "Ada"}))["entries"]
        by_action = {e["action"]: e["changes"] for e in entries}
        assert by_action["observations_invalidated"] == {
            "observations": ["lives in Paris"],
            "valid_until": "2022-01-01T00:00:00+00:00",
            "reason": "moved",
        }
        ended = by_action["relation_invalidated"]
        assert (ended["to"], ended["type"], ended["reason"]) == ("Acme", "works at", "left")
        # The relation's other end sees it too.
        acme = ok(await c.call_tool("entity_history", {"name": "Acme"}))["entries"]
        assert any(e["action"] == "relation_invalidated" for e in acme)
        tools = [e["tool"] for e in ok(await c.call_tool("audit_log", {}))["entries"]]
        assert "invalidate_observations" in tools and "invalidate_relations" in tools
        # An observation written again after its end holds anew, with its new source.
        ok(await c.call_tool("append_observations", {"items": [{"entity": "Ada", "observations": ["lives in Paris"]}]}))
        got = ok(await c.call_tool("get_entity", {"name": "Ada"}))
        assert got["observations"] == ["born in London", "lives in Paris"]
        assert (
            got["observation_records"][1]["source"] == CLIENT and got["observation_records"][1]["valid_until"] is None
        )


async def test_sources_default_to_the_client_and_filter_search_and_listing(vserver, tenant):
    async with vserver.client(tenant, SCOPES) as c:
        await upsert(c, [{"name": "Quasar", "type": "thing", "observations": ["glows brightly"]}])
        ok(
            await c.call_tool(
                "upsert_entities",
                {
                    "entities": [{"name": "Pulsar", "type": "thing", "observations": ["glows in pulses"]}],
                    "source": "  star atlas  ",
                },
            )
        )
        await relate(c, [{"from": "Pulsar", "to": "Quasar", "type": "near"}])
        quasar = ok(await c.call_tool("get_entity", {"name": "Quasar"}))
        record = quasar["observation_records"][0]
        assert record["source"] == CLIENT and record["created_by"] == "dev-user" and record["created_at"]
        assert quasar["relations"][0]["source"] == CLIENT and quasar["relations"][0]["created_by"] == "dev-user"

        def names(found: dict[str, Any]) -> list[str]:
            return sorted(h["entity"]["name"] for h in found["hits"])

        query = {"query": "glows", "mode": "keyword"}
        assert names(ok(await c.call_tool("search", query))) == ["Pulsar", "Quasar"]
        atlas = ok(await c.call_tool("search", {**query, "sources": ["star atlas"]}))
        assert names(atlas) == ["Pulsar"]
        match = atlas["hits"][0]["match"]
        assert (match["kind"], match["source"], match["created_by"]) == ("observation", "star atlas", "dev-user")
        assert match["created_at"] and match["valid_until"] is None
        assert names(ok(await c.call_tool("search", {**query, "sources": [CLIENT, "star atlas"]}))) == [
            "Pulsar",
            "Quasar",
        ]
        assert names(ok(await c.call_tool("search", {**query, "sources": ["nowhere"]}))) == []
        # Names match nothing under a source filter: only observations have sources.
        assert names(ok(await c.call_tool("search", {"query": "Quasar", "sources": ["star atlas"]}))) == []
        assert names(ok(await c.call_tool("search", {**query, "since": "2000-01-01T00:00:00Z"}))) == [
            "Pulsar",
            "Quasar",
        ]
        assert names(ok(await c.call_tool("search", {**query, "until": "2000-01-01T00:00:00Z"}))) == []

        def listed(found: dict[str, Any]) -> list[str]:
            return [e["name"] for e in found["entities"]]

        assert listed(ok(await c.call_tool("find_entities", {"sources": ["star atlas"]}))) == ["Pulsar"]
        assert listed(ok(await c.call_tool("find_entities", {"sources": [CLIENT], "sort": "name"}))) == ["Quasar"]
        assert listed(ok(await c.call_tool("find_entities", {"since": "2100-01-01T00:00:00Z"}))) == []
        window = {"since": "2000-01-01T00:00:00Z", "until": "2100-01-01T00:00:00Z", "sort": "name"}
        assert listed(ok(await c.call_tool("find_entities", window))) == ["Pulsar", "Quasar"]


async def test_upserted_observations_carry_their_entrys_interval(vserver, tenant):
    """An upsert entry's interval covers its observations, as an append_observations item's does; entries
    of one name fold, each observation keeping the interval of the first entry that gave it."""
    async with vserver.client(tenant, SCOPES) as c:
        made = ok(
            await c.call_tool(
                "upsert_entities",
                {
                    "entities": [
                        {
                            "name": "Ada",
                            "type": "person",
                            "observations": ["lives in Paris", "speaks French"],
                            "valid_from": "2019-01-01T00:00:00",  # no zone: UTC
                            "valid_until": Y2022,
                        },
                        {"name": "Ada", "type": "person", "observations": ["born in London", "speaks French"]},
                        {"name": "Bob", "type": "person", "observations": ["works at Acme"], "valid_from": Y2021},
                    ],
                    "source": "cv",
                },
            )
        )
        assert [(r["name"], r["observations_added"]) for r in made["results"]] == [("Ada", 3), ("Bob", 1)]

        def texts(entity: dict[str, Any]) -> list[str]:
            return entity["observations"]

        assert texts(ok(await c.call_tool("get_entity", {"name": "Ada"}))) == ["born in London"]
        then = ok(await c.call_tool("get_entity", {"name": "Ada", "as_of": Y2020}))
        assert texts(then) == ["lives in Paris", "speaks French", "born in London"]
        everything = ok(await c.call_tool("get_entity", {"name": "Ada", "include_invalid": True}))
        records = [
            (o["text"], o["source"], o["valid_from"], o["valid_until"]) for o in everything["observation_records"]
        ]
        assert [(t, src, f and f[:10], u and u[:10]) for t, src, f, u in records] == [
            ("lives in Paris", "cv", "2019-01-01", "2022-01-01"),
            ("speaks French", "cv", "2019-01-01", "2022-01-01"),  # its first entry's interval
            ("born in London", "cv", None, None),
        ]
        assert texts(ok(await c.call_tool("get_entity", {"name": "Bob", "as_of": Y2020}))) == []
        assert texts(ok(await c.call_tool("get_entity", {"name": "Bob", "as_of": Y2023}))) == ["works at Acme"]

        # Reads of every kind see the interval.
        query = {"query": "Paris", "mode": "keyword"}
        assert ok(await c.call_tool("search", query))["hits"] == []
        assert [h["entity"]["name"] for h in ok(await c.call_tool("search", {**query, "as_of": Y2021}))["hits"]] == [
            "Ada"
        ]
        listed = ok(await c.call_tool("find_entities", {"text_contains": "Acme", "as_of": Y2020}))
        assert listed["total"] == 0
        listed = ok(await c.call_tool("find_entities", {"text_contains": "Acme", "as_of": Y2023}))
        assert [e["name"] for e in listed["entities"]] == ["Bob"]

        # Written again: an ended fact holds anew with the new interval; one still valid is a duplicate.
        again = await upsert(
            c,
            [
                {"name": "Ada", "type": "person", "observations": ["lives in Paris"], "valid_from": Y2024},
                {"name": "Bob", "type": "person", "observations": ["works at Acme"], "valid_until": Y2023},
            ],
        )
        assert [(r["status"], r["observations_added"]) for r in again["results"]] == [("updated", 1), ("unchanged", 0)]
        paris = ok(await c.call_tool("get_entity", {"name": "Ada", "include_invalid": True}))["observation_records"]
        anew = [(o["valid_from"][:10], o["valid_until"], o["source"]) for o in paris if o["text"] == "lives in Paris"]
        assert anew == [("2024-01-01", None, CLIENT)]
        bob = ok(await c.call_tool("get_entity", {"name": "Bob"}))["observation_records"]
        assert [(o["valid_from"][:10], o["valid_until"]) for o in bob] == [("2021-01-01", None)]
        history = ok(await c.call_tool("entity_history", {"name": "Ada"}))["entries"]
        assert next(e["changes"] for e in history if e["action"] == "observations_added") == {
            "observations": ["lives in Paris"]
        }
    async with vserver.at("memory").client(tenant, SCOPES) as m:
        # The dialects see only what holds now, without intervals.
        nodes = ok(await m.call_tool("open_nodes", {"names": ["Ada", "Bob"]}))["entities"]
        assert [(n["name"], n["observations"]) for n in nodes] == [
            ("Ada", ["lives in Paris", "born in London"]),  # the fact written again keeps its place
            ("Bob", ["works at Acme"]),
        ]


async def test_an_upsert_with_an_empty_interval_is_refused_and_writes_nothing(vserver, tenant):
    async with vserver.client(tenant, SCOPES) as c:
        await _career(c)
        before = await _facts(vserver, tenant)
        entries = [
            {"name": "Newcomer", "type": "person", "observations": ["arrived"]},
            {"name": "Ada", "type": "person", "description": "changed", "observations": ["x"]},
        ]
        for bad in (
            {"valid_from": Y2024, "valid_until": Y2020},
            {"valid_from": Y2020, "valid_until": Y2020},
            {"valid_from": "2020-01-01T00:30:00-01:00", "valid_until": "2020-01-01T01:00:00Z"},  # 01:30 UTC
        ):
            refused = await c.call_tool("upsert_entities", {"entities": [*entries, {**entries[1], **bad}]})
            assert error_code(refused) == "invalid", bad
            assert "valid_from" in refused.content[0].text  # type: ignore[union-attr]
        assert await _facts(vserver, tenant) == before
        assert error_code(await c.call_tool("get_entity", {"name": "Newcomer"})) == "not_found"
        assert ok(await c.call_tool("get_entity", {"name": "Ada"}))["description"] == ""


async def test_search_and_listing_see_what_holds(vserver, tenant):
    async with vserver.client(tenant, SCOPES) as c:
        await _career(c)
        query = {"query": "Paris", "mode": "keyword"}
        assert ok(await c.call_tool("search", query))["hits"] == []
        then = ok(await c.call_tool("search", {**query, "as_of": Y2021}))
        assert [h["entity"]["name"] for h in then["hits"]] == ["Ada"]
        every = ok(await c.call_tool("search", {**query, "include_invalid": True}))
        assert every["hits"][0]["match"]["valid_until"].startswith("2022-01-01")
        assert every["hits"][0]["match"]["source"] == "cv"
        found = ok(await c.call_tool("find_entities", {"text_contains": "Paris"}))
        assert found["entities"] == [] and found["total"] == 0
        found = ok(await c.call_tool("find_entities", {"text_contains": "Paris", "as_of": Y2020}))
        assert [e["name"] for e in found["entities"]] == ["Ada"]
        found = ok(await c.call_tool("find_entities", {"sources": ["cv"], "include_invalid": True}))
        assert [e["name"] for e in found["entities"]] == ["Ada"]
        assert ok(await c.call_tool("find_entities", {"sources": ["cv"]}))["total"] == 0


async def test_the_dialects_never_show_ended_facts(vserver, tenant):
    async with vserver.client(tenant, SCOPES) as c:
        await _career(c)
    names = {"names": ["Ada", "Acme", "Bob", "Initech"]}
    for tool_set, tool, args in (
        ("memory", "read_graph", {}),
        ("memory", "search_nodes", {"query": "a"}),
        ("memory", "open_nodes", names),
        ("neo4j", "read_graph", {}),
        ("neo4j", "find_memories_by_name", names),
    ):
        async with vserver.at(tool_set).client(tenant, SCOPES) as d:
            graph = ok(await d.call_tool(tool, args))
        ada = next(e for e in graph["entities"] if e["name"] == "Ada")
        assert ada["observations"] == ["born in London"], tool
        pairs = sorted((r.get("from") or r.get("source"), r.get("to") or r.get("target")) for r in graph["relations"])
        assert ("Ada", "Acme") not in pairs and ("Ada", "Initech") in pairs, tool
        shapes = ({"from", "to", "relationType"}, {"source", "target", "relationType"})
        assert all(set(r) in shapes for r in graph["relations"]), tool  # no interval, no source
    async with vserver.at("memory").client(tenant, SCOPES) as c:
        assert ok(await c.call_tool("search_nodes", {"query": "Paris"}))["entities"] == []
        # What is hidden there does not exist there: adding it again makes it hold again.
        added = ok(
            await c.call_tool(
                "add_observations", {"observations": [{"entityName": "Ada", "contents": ["lives in Paris"]}]}
            )
        )
        assert added["results"] == [{"entityName": "Ada", "addedObservations": ["lives in Paris"]}]
        made = ok(
            await c.call_tool(
                "create_relations", {"relations": [{"from": "Ada", "to": "Acme", "relationType": "works at"}]}
            )
        )
        assert made["relations"] == [{"from": "Ada", "to": "Acme", "relationType": "works at"}]
        opened = ok(await c.call_tool("open_nodes", {"names": ["Ada"]}))
        assert opened["entities"][0]["observations"] == ["born in London", "lives in Paris"]
        assert {"from": "Ada", "to": "Acme", "relationType": "works at"} in opened["relations"]


async def test_invalidating_never_reaches_another_tenant(vserver, tenant):
    other = tenant + "-other"
    async with vserver.client(tenant, SCOPES) as c:
        await _career(c)
        rel = ok(await c.call_tool("get_entity", {"name": "Ada"}))["relations"][0]["id"]
    async with vserver.client(other, SCOPES) as c:
        await upsert(c, [{"name": "Ada", "type": "person"}])
        missing = await c.call_tool(
            "invalidate_relations", {"relations": [{"from": "Ada", "to": "Initech", "type": "works at"}]}
        )
        assert ok(missing) == {"invalidated": [], "unchanged": 1}  # Initech is not in this tenant
        assert ok(await c.call_tool("invalidate_relations", {"ids": [rel]})) == {"invalidated": [], "unchanged": 1}
        none = ok(
            await c.call_tool(
                "invalidate_observations", {"items": [{"entity": "Ada", "observations": ["born in London"]}]}
            )
        )
        assert none["results"][0]["observations"] == []
        assert (
            error_code(
                await c.call_tool("invalidate_observations", {"items": [{"entity": "Acme", "observations": ["x"]}]})
            )
            == "not_found"
        )
    async with vserver.client(tenant, SCOPES) as c:
        ada = ok(await c.call_tool("get_entity", {"name": "Ada"}))
        assert ada["observations"] == ["born in London"] and [r["id"] for r in ada["relations"]] == [rel]


async def test_an_end_before_the_start_is_refused_and_changes_nothing(vserver, tenant):
    async with vserver.client(tenant, SCOPES) as c:
        await _career(c)
        before = ok(await c.call_tool("get_entity", {"name": "Ada", "include_invalid": True}))
        early = await c.call_tool(
            "invalidate_relations",
            {"relations": [{"from": "Ada", "to": "Initech", "type": "works at"}], "at": Y2020},
        )
        assert error_code(early) == "invalid"
        ok(
            await c.call_tool(
                "append_observations", {"items": [{"entity": "Ada", "observations": ["x"], "valid_from": Y2024}]}
            )
        )
        early = await c.call_tool(
            "invalidate_observations",
            {"items": [{"entity": "Ada", "observations": ["x", "born in London"]}], "at": Y2023},
        )
        assert error_code(early) == "invalid"
        after = ok(await c.call_tool("get_entity", {"name": "Ada", "include_invalid": True}))
        assert after["relations"] == before["relations"]
        assert [o["valid_until"] for o in after["observation_records"]][:2] == [
            o["valid_until"] for o in before["observation_records"]
        ]
        # A fact that begins later than now is not valid yet.
        assert "x" not in ok(await c.call_tool("get_entity", {"name": "Ada", "as_of": Y2023}))["observations"]


HOSTILE = [
    ("get_entity", {"name": "Ada", "as_of": "not a time"}),
    ("get_entity", {"name": "Ada", "as_of": "2020-13-01T00:00:00Z"}),
    ("get_entity", {"name": "Ada", "as_of": 5}),
    ("get_entity", {"name": "Ada", "as_of": "10000-01-01T00:00:00Z"}),
    ("get_entity", {"name": "Ada", "include_invalid": "yes"}),
    ("get_entity", {"name": "Ada", "as_of": Y2020, "include_invalid": True}),
    ("neighbors", {"entity": "Ada", "as_of": Y2020, "include_invalid": True}),
    ("shortest_path", {"from": "Ada", "to": "Bob", "as_of": [Y2020]}),
    ("subgraph", {"entities": ["Ada"], "as_of": {"at": Y2020}}),
    ("relation_chain", {"entity": "Ada", "relation_type": "works at", "include_invalid": 2}),
    ("search", {"query": "Ada", "since": Y2024, "until": Y2020}),
    ("search", {"query": "Ada", "since": Y2020, "until": Y2020}),
    ("search", {"query": "Ada", "sources": "cv"}),
    ("search", {"query": "Ada", "sources": ["x" * 201]}),
    ("search", {"query": "Ada", "sources": [""]}),
    ("search", {"query": "Ada", "sources": ["s"] * 21}),
    ("find_entities", {"since": Y2024, "until": Y2020}),
    ("find_entities", {"sources": [None]}),
    ("upsert_entities", {"entities": [{"name": "Ada", "type": "person"}], "source": "x" * 201}),
    ("upsert_entities", {"entities": [{"name": "Ada", "type": "person"}], "source": "   "}),
    ("upsert_entities", {"entities": [{"name": "Ada", "type": "person", "valid_from": Y2020}]}),  # no facts
    ("upsert_entities", {"entities": [{"name": "Ada", "type": "person", "observations": [], "valid_until": Y2020}]}),
    ("upsert_entities", {"entities": [{"name": "Ada", "type": "p", "observations": ["o"], "valid_from": "soon"}]}),
    ("upsert_entities", {"entities": [{"name": "Ada", "type": "p", "observations": ["o"], "valid_until": 1700000000}]}),
    (
        "upsert_entities",
        {"entities": [{"name": "Ada", "type": "p", "observations": ["o"], "valid_from": "10000-01-01T00:00:00Z"}]},
    ),
    (
        "upsert_entities",
        {"entities": [{"name": "Ada", "type": "p", "observations": ["o"], "valid_until": "0001-01-01T00:00:00+01:00"}]},
    ),
    (
        "upsert_entities",
        {"entities": [{"name": "Ada", "type": "p", "observations": ["o"], "valid_from": [Y2020]}]},
    ),
    (
        "append_observations",
        {"items": [{"entity": "Ada", "observations": ["o"], "valid_from": Y2024, "valid_until": Y2020}]},
    ),
    (
        "append_observations",
        {"items": [{"entity": "Ada", "observations": ["o"], "valid_from": Y2020, "valid_until": Y2020}]},
    ),
    ("append_observations", {"items": [{"entity": "Ada", "observations": ["o"], "valid_until": "yesterday"}]}),
    ("append_observations", {"items": [{"entity": "Ada", "observations": ["o"], "source": 7}]}),
    (
        "connect_entities",
        {"relations": [{"from": "Ada", "to": "Bob", "type": "t", "valid_from": Y2024, "valid_until": Y2019}]},
    ),
    ("connect_entities", {"relations": [{"from": "Ada", "to": "Bob", "type": "t", "source": "x" * 10_000}]}),
    ("invalidate_observations", {"items": []}),
    ("invalidate_observations", {"items": [{"entity": "Ada", "observations": ["born in London"]}], "at": "0"}),
    (
        "invalidate_observations",
        {"items": [{"entity": "Ada", "observations": ["born in London"]}], "reason": "r" * 1001},
    ),
    ("invalidate_observations", {"items": [{"entity": "Ada", "observations": ["born in London"]}], "reason": ""}),
    ("invalidate_relations", {}),
    ("invalidate_relations", {"ids": ["not-an-id"]}),
    ("invalidate_relations", {"ids": [], "relations": [], "at": Y2020}),
    ("invalidate_relations", {"relations": [{"from": "Ada", "to": "Bob", "type": "t"}] * 101}),
    ("invalidate_relations", {"relations": [{"from": "Ada", "to": "Acme", "type": "works at"}], "at": True}),
]


async def _facts(server: Server, tenant: str) -> list[Any]:
    """Everything invalidation and provenance could change in a tenant."""
    conn = await asyncpg.connect(server.settings.admin_dsn())
    try:
        s = await conn.fetchval("SELECT schema_name FROM engram.tenants WHERE key = $1", tenant)
        return [
            [tuple(r) for r in await conn.fetch(q.format(s=s))]
            for q in (
                "SELECT id, content, source, valid_from, valid_until, created_at FROM {s}.observations ORDER BY id",
                'SELECT id::text, ag_catalog.agtype_out(properties)::text FROM {s}."REL" ORDER BY id',
                "SELECT edge::text, valid_from, valid_until FROM {s}.rel_intervals ORDER BY edge",
                "SELECT count(*), max(id) FROM {s}.history",
            )
        ]
    finally:
        await conn.close()


async def test_hostile_arguments_are_invalid_and_change_nothing(vserver, tenant):
    async with vserver.client(tenant, SCOPES) as c:
        await _career(c)
        before = await _facts(vserver, tenant)
        for tool, args in HOSTILE:
            result = await c.call_tool(tool, args)
            assert error_code(result) == "invalid", (tool, args, result.content)
        assert await _facts(vserver, tenant) == before
        # Moments at the ends of the calendar are answers, not errors.
        for at, near in (("0001-01-01T00:00:00Z", []), ("9999-12-31T23:59:59Z", ["Initech"])):
            assert ok(await c.call_tool("get_entity", {"name": "Ada", "as_of": at}))["name"] == "Ada"
            assert _names(ok(await c.call_tool("neighbors", {"entity": "Ada", "as_of": at}))) == near
            assert ok(await c.call_tool("search", {"query": "Paris", "mode": "keyword", "as_of": at}))["hits"] == []
            assert ok(await c.call_tool("shortest_path", {"from": "Ada", "to": "Bob", "as_of": at}))["found"] is False
            # Ada has the only observations, written after year 1 and before year 9999.
            assert ok(await c.call_tool("find_entities", {"since": at}))["total"] == int(at.startswith("0001"))
        assert await _facts(vserver, tenant) == before


async def test_engram_files_carry_intervals_and_sources_and_dialect_files_do_not(vserver, tenant, tmp_path: Path):
    async with vserver.client(tenant, SCOPES) as c:
        await _career(c)
    first = export(vserver, tenant, tmp_path / "a.jsonl")
    rows = lines_of(first)
    ada = next(r for r in rows if r.get("name") == "Ada")
    paris = next(o for o in ada["observations"] if o["text"] == "lives in Paris")
    assert (paris["source"], paris["valid_from"][:4], paris["valid_until"][:4]) == ("cv", "2019", "2022")
    assert next(o for o in ada["observations"] if o["text"] == "born in London")["source"] == CLIENT
    acme = next(r for r in rows if r.get("to") == "Acme")
    assert (acme["source"], acme["valid_from"][:4], acme["valid_until"][:4]) == ("cv", "2019", "2023")

    copy = tenant + "-copy"
    done = summary(vserver, copy, tmp_path / "a.jsonl")
    assert done["complete"] and done["refused_total"] == 0
    assert export(vserver, copy, tmp_path / "b.jsonl") == first
    async with vserver.client(copy, SCOPES) as c:  # the copy reads like the original
        assert _names(ok(await c.call_tool("neighbors", {"entity": "Ada", "depth": 2}))) == ["Initech"]
        assert _names(ok(await c.call_tool("neighbors", {"entity": "Ada", "depth": 2, "as_of": Y2021}))) == [
            "Acme",
            "Bob",
        ]
        assert ok(await c.call_tool("get_entity", {"name": "Ada"}))["observations"] == ["born in London"]

    for fmt in ("memory", "neo4j"):
        data = export(vserver, tenant, tmp_path / f"{fmt}.json", "--format", fmt)
        assert b"Paris" not in data and b"valid" not in data and b"cv" not in data
        assert b"Initech" in data and data.count(b"works at") == 1
