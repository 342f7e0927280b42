"""The `memory` tool set against the reference `@modelcontextprotocol/server-memory`, case by case.

Each test is one behaviour of the reference's KnowledgeGraphManager and tool handlers (names,
fields, structured and text content, annotations, duplicates, missing entities, cascades, relation
selection), or one of Engram's documented fixes (docs/tools.md, "server-memory dialect"): dangling
relations refused, batch duplicates written once, no lost concurrent writes, a paged read_graph,
soft deletes, tenant isolation. Against the /mcp/memory endpoint, as a client would use it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError

from app.auth.principal import READ
from tests.support.client import error_code, ok, text
from tests.support.server import Server, serve

# name: (title, description, (readOnly, destructive, idempotent, openWorld), required input, output fields)
REFERENCE = {
    "create_entities": (
        "Create Entities",
        "Create multiple new entities in the knowledge graph",
        (False, False, False, False),
        ["entities"],
        {"entities"},
    ),
    "create_relations": (
        "Create Relations",
        "Create multiple new relations between entities in the knowledge graph. Relations should be in active voice",
        (False, False, False, False),
        ["relations"],
        {"relations"},
    ),
    "add_observations": (
        "Add Observations",
        "Add new observations to existing entities in the knowledge graph",
        (False, False, False, False),
        ["observations"],
        {"results"},
    ),
    "delete_entities": (
        "Delete Entities",
        "Delete multiple entities and their associated relations from the knowledge graph",
        (False, True, True, False),
        ["entityNames"],
        {"success", "message"},
    ),
    "delete_observations": (
        "Delete Observations",
        "Delete specific observations from entities in the knowledge graph",
        (False, True, True, False),
        ["deletions"],
        {"success", "message"},
    ),
    "delete_relations": (
        "Delete Relations",
        "Delete multiple relations from the knowledge graph",
        (False, True, True, False),
        ["relations"],
        {"success", "message"},
    ),
    "read_graph": (
        "Read Graph",
        "Read the entire knowledge graph",
        (True, False, True, False),
        [],
        {"entities", "relations"},
    ),
    "search_nodes": (
        "Search Nodes",
        "Search for nodes in the knowledge graph based on a query",
        (True, False, True, False),
        ["query"],
        {"entities", "relations"},
    ),
    "open_nodes": (
        "Open Nodes",
        "Open specific nodes in the knowledge graph by their names",
        (True, False, True, False),
        ["names"],
        {"entities", "relations"},
    ),
}
ITEM_FIELDS = {
    ("create_entities", "entities"): {"name", "entityType", "observations"},
    ("create_relations", "relations"): {"from", "to", "relationType"},
    ("delete_relations", "relations"): {"from", "to", "relationType"},
    ("add_observations", "observations"): {"entityName", "contents"},
    ("delete_observations", "deletions"): {"entityName", "observations"},
}


@pytest.fixture
def server(server: Server) -> Server:
    """The shared server at the server-memory endpoint (`client_for` uses it too)."""
    return server.at("memory")


def pretty(value: Any) -> str:
    """The reference's text content: JSON.stringify(value, null, 2), which this reproduces exactly."""
    return json.dumps(value, indent=2, ensure_ascii=False)


def entity(name: str, entity_type: str = "thing", *observations: str) -> dict[str, Any]:
    return {"name": name, "entityType": entity_type, "observations": list(observations)}


def rel(source: str, target: str, relation_type: str) -> dict[str, str]:
    return {"from": source, "to": target, "relationType": relation_type}


def uncursored(page: dict[str, Any]) -> dict[str, Any]:
    """A page without its cursor, which carries the second it was issued in."""
    return {k: v for k, v in page.items() if k != "nextCursor"}


def key(r: dict[str, str]) -> tuple[str, str, str]:
    return r["from"], r["relationType"], r["to"]


def resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = schema["$defs"][node["$ref"].rsplit("/", 1)[-1]]
    return node


async def open_nodes(c: Any, *names: str) -> dict[str, Any]:
    return ok(await c.call_tool("open_nodes", {"names": list(names)}))


async def test_tools_have_the_reference_names_titles_descriptions_annotations_and_fields(client_for, tenant):
    async with client_for(tenant) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        assert (
            c.instructions is not None
            and "search_nodes" in c.instructions
            and "search_memories" not in (c.instructions)
        )
    assert set(REFERENCE) <= set(tools)
    for name, (title, description, hints, required, output) in REFERENCE.items():
        tool = tools[name]
        assert tool.title == title, name
        assert tool.description is not None and tool.description.startswith(description), name
        a = tool.annotations
        assert a is not None
        assert (a.read_only_hint, a.destructive_hint, a.idempotent_hint, a.open_world_hint) == hints, name
        assert sorted(tool.input_schema.get("required", [])) == sorted(required), name
        assert tool.output_schema is not None and output <= set(tool.output_schema["properties"]), name
        assert set(tool.output_schema.get("required", [])) == output, name
    for (name, field), fields in ITEM_FIELDS.items():
        schema = tools[name].input_schema
        item = resolve(schema, schema["properties"][field]["items"])
        assert set(item["properties"]) == fields and set(item["required"]) == fields, (name, field)
    assert tools["delete_entities"].input_schema["properties"]["entityNames"]["items"]["type"] == "string"
    assert tools["open_nodes"].input_schema["properties"]["names"]["items"]["type"] == "string"
    assert tools["search_nodes"].input_schema["properties"]["query"]["type"] == "string"
    # Engram's bound on the reference's unbounded arrays.
    assert tools["create_entities"].input_schema["properties"]["entities"]["maxItems"] == 100


async def test_create_entities_returns_the_new_ones_and_skips_existing_names(client_for, tenant):
    async with client_for(tenant) as c:
        first = [entity("Ada", "person", "wrote the first program"), entity("Zoë AG", "company", "café 🧠")]
        result = await c.call_tool("create_entities", {"entities": first})
        assert ok(result) == {"entities": first}
        assert text(result) == pretty(first)  # the reference's text is the array alone

        again = await c.call_tool(
            "create_entities", {"entities": [entity("Ada", "robot", "is a robot"), entity("Babbage", "person")]}
        )
        assert ok(again) == {"entities": [entity("Babbage", "person")]}
        assert text(again) == pretty([entity("Babbage", "person")])
        # The existing entity is skipped, not merged; names are exact, so "ada" is another entity.
        assert (await open_nodes(c, "Ada"))["entities"] == [entity("Ada", "person", "wrote the first program")]
        assert ok(await c.call_tool("create_entities", {"entities": [entity("ada")]})) == {"entities": [entity("ada")]}

        nothing = await c.call_tool("create_entities", {"entities": []})
        assert ok(nothing) == {"entities": []} and text(nothing) == "[]"


async def test_create_entities_writes_duplicates_inside_a_batch_once(client_for, tenant):
    """Fix: the reference stores both entries of a repeated name; Engram keeps the first, once."""
    async with client_for(tenant) as c:
        batch = [entity("Twin", "first", "a", "a", "b"), entity("Twin", "second", "c"), entity("Solo")]
        created = ok(await c.call_tool("create_entities", {"entities": batch}))
        assert created == {"entities": [entity("Twin", "first", "a", "b"), entity("Solo")]}
        graph = ok(await c.call_tool("read_graph", {}))
        assert graph["entities"] == [entity("Solo"), entity("Twin", "first", "a", "b")]


async def test_create_relations_returns_the_new_ones_and_skips_exact_duplicates(client_for, tenant):
    async with client_for(tenant) as c:
        ok(await c.call_tool("create_entities", {"entities": [entity("Ada"), entity("Acme"), entity("Bob")]}))
        works = rel("Ada", "Acme", "works at")
        result = await c.call_tool("create_relations", {"relations": [works]})
        assert ok(result) == {"relations": [works]}
        assert text(result) == pretty([works])

        # Same ends with another type, and the reverse direction, are different relations.
        batch = [works, rel("Ada", "Acme", "founded"), rel("Acme", "Ada", "works at"), rel("Bob", "Acme", "x")]
        again = ok(await c.call_tool("create_relations", {"relations": batch}))
        assert again == {"relations": batch[1:]}

        # Fix: a repeat inside one batch is written (and reported) once.
        repeat = rel("Bob", "Ada", "knows")
        assert ok(await c.call_tool("create_relations", {"relations": [repeat, repeat]})) == {"relations": [repeat]}
        graph = ok(await c.call_tool("read_graph", {}))
        assert sorted(map(key, graph["relations"])) == sorted(map(key, [*batch, repeat]))

        assert ok(await c.call_tool("create_relations", {"relations": []})) == {"relations": []}


async def test_create_relations_to_a_missing_entity_is_refused_and_saves_nothing(client_for, tenant):
    """Fix: the reference stores a dangling relation; Engram refuses the whole batch."""
    async with client_for(tenant) as c:
        ok(await c.call_tool("create_entities", {"entities": [entity("Ada"), entity("Acme")]}))
        refused = await c.call_tool(
            "create_relations", {"relations": [rel("Ada", "Acme", "works at"), rel("Ada", "Nowhere", "lives in")]}
        )
        assert error_code(refused) == "not_found" and "Nowhere" in text(refused)
        # Names are exact: a different case is not the same entity.
        assert error_code(await c.call_tool("create_relations", {"relations": [rel("ada", "Acme", "x")]})) == (
            "not_found"
        )
        assert ok(await c.call_tool("read_graph", {}))["relations"] == []


async def test_add_observations_adds_only_new_contents(client_for, tenant):
    async with client_for(tenant) as c:
        ok(await c.call_tool("create_entities", {"entities": [entity("Ada", "person", "born 1815"), entity("Acme")]}))
        result = await c.call_tool(
            "add_observations",
            {
                "observations": [
                    {"entityName": "Ada", "contents": ["born 1815", "wrote notes", "wrote notes"]},
                    {"entityName": "Acme", "contents": ["makes anvils"]},
                    {"entityName": "Ada", "contents": ["wrote notes", "met Babbage"]},
                    {"entityName": "Acme", "contents": []},
                ]
            },
        )
        expected = [
            {"entityName": "Ada", "addedObservations": ["wrote notes"]},
            {"entityName": "Acme", "addedObservations": ["makes anvils"]},
            {"entityName": "Ada", "addedObservations": ["met Babbage"]},
            {"entityName": "Acme", "addedObservations": []},
        ]
        assert ok(result) == {"results": expected}
        assert text(result) == pretty(expected)
        graph = await open_nodes(c, "Ada", "Acme")
        assert graph["entities"] == [
            entity("Acme", "thing", "makes anvils"),
            entity("Ada", "person", "born 1815", "wrote notes", "met Babbage"),
        ]


async def test_add_observations_to_an_unknown_entity_fails_and_saves_nothing(client_for, tenant):
    async with client_for(tenant) as c:
        ok(await c.call_tool("create_entities", {"entities": [entity("Ada")]}))
        failed = await c.call_tool(
            "add_observations",
            {"observations": [{"entityName": "Ada", "contents": ["x"]}, {"entityName": "Ghost", "contents": ["y"]}]},
        )
        assert error_code(failed) == "not_found"
        assert "Entity with name Ghost not found" in text(failed)  # the reference's message
        assert (await open_nodes(c, "Ada"))["entities"] == [entity("Ada")]


async def test_delete_entities_cascades_to_relations_and_ignores_unknown_names(client_for, tenant):
    async with client_for(tenant) as c:
        names = ["A", "B", "C"]
        ok(await c.call_tool("create_entities", {"entities": [entity(n) for n in names]}))
        relations = [rel("A", "B", "r"), rel("B", "C", "r"), rel("C", "A", "r"), rel("B", "B", "self")]
        ok(await c.call_tool("create_relations", {"relations": relations}))

        result = await c.call_tool("delete_entities", {"entityNames": ["B", "Nobody"]})
        assert ok(result) == {"success": True, "message": "Entities deleted successfully"}
        assert text(result) == "Entities deleted successfully"
        graph = ok(await c.call_tool("read_graph", {}))
        assert [e["name"] for e in graph["entities"]] == ["A", "C"]
        assert graph["relations"] == [rel("C", "A", "r")]
        assert ok(await c.call_tool("delete_entities", {"entityNames": []}))["success"] is True


async def test_delete_observations_removes_exact_texts_and_ignores_unknowns(client_for, tenant):
    async with client_for(tenant) as c:
        ok(await c.call_tool("create_entities", {"entities": [entity("Ada", "person", "a", "b", "c")]}))
        result = await c.call_tool(
            "delete_observations",
            {
                "deletions": [
                    {"entityName": "Ada", "observations": ["a", "C", "not stored"]},
                    {"entityName": "Ghost", "observations": ["a"]},
                ]
            },
        )
        assert ok(result) == {"success": True, "message": "Observations deleted successfully"}
        assert text(result) == "Observations deleted successfully"
        assert (await open_nodes(c, "Ada"))["entities"] == [entity("Ada", "person", "b", "c")]


async def test_delete_relations_removes_exact_matches_and_ignores_unknowns(client_for, tenant):
    async with client_for(tenant) as c:
        ok(await c.call_tool("create_entities", {"entities": [entity("A"), entity("B")]}))
        ok(await c.call_tool("create_relations", {"relations": [rel("A", "B", "likes"), rel("B", "A", "likes")]}))
        result = await c.call_tool(
            "delete_relations",
            {"relations": [rel("A", "B", "likes"), rel("A", "B", "LIKES"), rel("A", "Ghost", "likes")]},
        )
        assert ok(result) == {"success": True, "message": "Relations deleted successfully"}
        assert text(result) == "Relations deleted successfully"
        assert ok(await c.call_tool("read_graph", {}))["relations"] == [rel("B", "A", "likes")]


async def test_search_nodes_matches_name_type_and_observations_case_insensitively(client_for, tenant):
    async with client_for(tenant) as c:
        ok(
            await c.call_tool(
                "create_entities",
                {
                    "entities": [
                        entity("Ada Lovelace", "person", "Wrote the first PROGRAM"),
                        entity("Analytical Engine", "machine"),
                        entity("Charles", "Programmer"),
                        entity("Zoë", "person", "100% sure", "likes snake_case"),
                        entity("Other", "thing"),
                    ]
                },
            )
        )
        relations = [rel("Ada Lovelace", "Analytical Engine", "programmed"), rel("Other", "Zoë", "knows")]
        ok(await c.call_tool("create_relations", {"relations": relations}))

        found = await c.call_tool("search_nodes", {"query": "program"})
        graph = ok(found)
        assert text(found) == pretty(graph)
        assert [e["name"] for e in graph["entities"]] == ["Ada Lovelace", "Charles"]  # observation, type
        # Relations with either end in the result, even to an entity outside it.
        assert graph["relations"] == [relations[0]]

        assert [e["name"] for e in ok(await c.call_tool("search_nodes", {"query": "LOVELACE"}))["entities"]] == [
            "Ada Lovelace"
        ]
        zoe = ok(await c.call_tool("search_nodes", {"query": "zoË"}))
        assert [e["name"] for e in zoe["entities"]] == ["Zoë"] and zoe["relations"] == [relations[1]]
        # LIKE wildcards in the query are plain characters.
        assert [e["name"] for e in ok(await c.call_tool("search_nodes", {"query": "0%"}))["entities"]] == ["Zoë"]
        assert [e["name"] for e in ok(await c.call_tool("search_nodes", {"query": "_"}))["entities"]] == ["Zoë"]
        assert ok(await c.call_tool("search_nodes", {"query": "%"}))["entities"] == [
            entity("Zoë", "person", "100% sure", "likes snake_case")
        ]
        assert ok(await c.call_tool("search_nodes", {"query": "nothing like this"})) == {
            "entities": [],
            "relations": [],
        }
        # An empty query matches everything, as in the reference.
        assert len(ok(await c.call_tool("search_nodes", {"query": ""}))["entities"]) == 5


async def test_open_nodes_returns_exact_names_and_relations_touching_them(client_for, tenant):
    async with client_for(tenant) as c:
        ok(await c.call_tool("create_entities", {"entities": [entity(n) for n in ("A", "B", "C", "D")]}))
        relations = [rel("A", "B", "r"), rel("C", "A", "r"), rel("C", "D", "r")]
        ok(await c.call_tool("create_relations", {"relations": relations}))
        result = await c.call_tool("open_nodes", {"names": ["A", "Missing", "d", "A"]})
        graph = ok(result)
        assert text(result) == pretty(graph)
        assert graph["entities"] == [entity("A")]
        assert sorted(map(key, graph["relations"])) == sorted(map(key, relations[:2]))
        assert await open_nodes(c) == {"entities": [], "relations": []}


async def test_read_graph_of_a_small_graph_is_whole(client_for, tenant):
    async with client_for(tenant) as c:
        assert ok(await c.call_tool("read_graph", {})) == {"entities": [], "relations": []}
        ok(await c.call_tool("create_entities", {"entities": [entity("B", "t", "o"), entity("A")]}))
        ok(await c.call_tool("create_relations", {"relations": [rel("A", "B", "works at")]}))
        result = await c.call_tool("read_graph", {})
        graph = ok(result)
        assert graph == {"entities": [entity("A"), entity("B", "t", "o")], "relations": [rel("A", "B", "works at")]}
        assert text(result) == pretty(graph)
        # The reference's resource shows the graph the same way.
        resource = await c.read_resource("memory://knowledge-graph")
        assert resource.contents[0].text == pretty(graph)  # type: ignore[union-attr]


async def test_deletes_are_soft_and_restore_entities_brings_them_back_with_relations(server, tenant):
    async with server.client(tenant) as c, server.at("native").client(tenant) as native:
        ok(await c.call_tool("create_entities", {"entities": [entity("Ada", "person", "born 1815"), entity("Acme")]}))
        ok(await c.call_tool("create_relations", {"relations": [rel("Ada", "Acme", "works at")]}))
        ada_id = ok(await native.call_tool("get_entity", {"name": "Ada"}))["id"]

        ok(await c.call_tool("delete_entities", {"entityNames": ["Ada"]}))
        assert await open_nodes(c, "Ada", "Acme") == {"entities": [entity("Acme")], "relations": []}
        assert ok(await c.call_tool("search_nodes", {"query": "1815"}))["entities"] == []
        failed = await c.call_tool("add_observations", {"observations": [{"entityName": "Ada", "contents": ["x"]}]})
        assert error_code(failed) == "not_found"

        ok(await native.call_tool("restore_entities", {"ids": [ada_id]}))
        assert await open_nodes(c, "Ada") == {
            "entities": [entity("Ada", "person", "born 1815")],
            "relations": [rel("Ada", "Acme", "works at")],
        }


async def test_concurrent_writers_never_lose_each_others_writes(server, tenant):
    """Fix: the reference reads, changes and rewrites one file per call, so parallel calls overwrite each other."""
    async with server.client(tenant) as c:
        ok(await c.call_tool("create_entities", {"entities": [entity("Hub")]}))

    async def writer(i: int) -> None:
        async with server.client(tenant) as w:
            for j in range(3):
                ok(await w.call_tool("create_entities", {"entities": [entity(f"n{i}-{j}"), entity("Shared")]}))
                ok(
                    await w.call_tool(
                        "add_observations", {"observations": [{"entityName": "Hub", "contents": [f"fact {i}-{j}"]}]}
                    )
                )
                ok(await w.call_tool("create_relations", {"relations": [rel(f"n{i}-{j}", "Hub", "feeds")]}))

    await asyncio.gather(*(writer(i) for i in range(6)))
    async with server.client(tenant) as c:
        hub = await open_nodes(c, "Hub", "Shared")
    expected = {f"{i}-{j}" for i in range(6) for j in range(3)}
    assert [e["name"] for e in hub["entities"]] == ["Hub", "Shared"]
    assert sorted(hub["entities"][0]["observations"]) == sorted(f"fact {n}" for n in expected)
    assert sorted(r["from"] for r in hub["relations"]) == sorted(f"n{n}" for n in expected)


async def test_another_tenants_names_are_never_read_changed_or_linked(client_for, tenant):
    other = tenant + "-other"
    async with client_for(tenant) as a:
        ok(await a.call_tool("create_entities", {"entities": [entity("Secret", "plan", "launch on Tuesday")]}))
    async with client_for(other) as b:
        assert await open_nodes(b, "Secret") == {"entities": [], "relations": []}
        assert ok(await b.call_tool("search_nodes", {"query": "Tuesday"}))["entities"] == []
        assert ok(await b.call_tool("read_graph", {})) == {"entities": [], "relations": []}
        added = await b.call_tool("add_observations", {"observations": [{"entityName": "Secret", "contents": ["x"]}]})
        assert error_code(added) == "not_found"
        ok(await b.call_tool("create_entities", {"entities": [entity("Spy")]}))
        linked = await b.call_tool("create_relations", {"relations": [rel("Spy", "Secret", "steals")]})
        assert error_code(linked) == "not_found"
        dels = [{"entityName": "Secret", "observations": ["launch on Tuesday"]}]
        ok(await b.call_tool("delete_observations", {"deletions": dels}))
        ok(await b.call_tool("delete_entities", {"entityNames": ["Secret"]}))
        # The same name in this tenant is its own, new entity.
        assert ok(await b.call_tool("create_entities", {"entities": [entity("Secret", "decoy")]})) == {
            "entities": [entity("Secret", "decoy")]
        }
    async with client_for(tenant) as a:
        assert await open_nodes(a, "Secret") == {
            "entities": [entity("Secret", "plan", "launch on Tuesday")],
            "relations": [],
        }


async def test_invalid_input_is_refused_before_anything_is_saved(client_for, tenant):
    async with client_for(tenant) as c:
        bad_calls = [
            ("create_entities", {"entities": [entity("x" * 501)]}),
            ("create_entities", {"entities": [entity("ok"), {"name": "no observations", "entityType": "t"}]}),
            ("create_entities", {"entities": [{**entity("ok"), "extra": 1}]}),
            ("create_entities", {"entities": [entity("ok"), entity("")]}),
            ("create_entities", {"entities": [entity(f"n{i}") for i in range(101)]}),
            ("create_entities", {"entities": [entity("ok", "t", "o" * 16_001)]}),
            ("create_relations", {"relations": [{"source": "a", "target": "b", "relationType": "r"}]}),
            ("add_observations", {"observations": [{"entityName": "ok", "observations": ["x"]}]}),
            ("open_nodes", {"names": "ok"}),
            ("search_nodes", {}),
        ]
        for name, args in bad_calls:
            assert (await c.call_tool(name, args)).is_error, (name, args)
        assert ok(await c.call_tool("read_graph", {})) == {"entities": [], "relations": []}


async def test_names_types_and_observations_are_kept_byte_for_byte_as_the_reference_keeps_them(client_for, tenant):
    """Fix of an earlier rule: nothing is trimmed, so " Ada " and "Ada" are two entities, as in the reference."""
    async with client_for(tenant) as c:
        created = ok(await c.call_tool("create_entities", {"entities": [entity("  Ada ", " person", "fact  ")]}))
        assert created == {"entities": [entity("  Ada ", " person", "fact  ")]}
        ok(await c.call_tool("create_entities", {"entities": [entity("Acme"), entity("Ada")]}))
        assert ok(await c.call_tool("create_relations", {"relations": [rel("  Ada ", "Acme", " works at ")]})) == {
            "relations": [rel("  Ada ", "Acme", " works at ")]
        }
        assert await open_nodes(c, "  Ada ") == {
            "entities": [entity("  Ada ", " person", "fact  ")],
            "relations": [rel("  Ada ", "Acme", " works at ")],
        }
        assert error_code(await c.call_tool("create_relations", {"relations": [rel(" Ada", "Acme", "x")]})) == (
            "not_found"
        )


async def test_a_read_only_token_cannot_write(client_for, tenant):
    async with client_for(tenant, scopes=(READ,)) as c:
        with pytest.raises(MCPError):  # answered 403 insufficient_scope at the HTTP layer (tests/test_auth.py)
            await c.call_tool("create_entities", {"entities": [entity("x")]})
    async with client_for(tenant, scopes=(READ,)) as c:
        assert ok(await c.call_tool("read_graph", {})) == {"entities": [], "relations": []}


# --- bounded answers, on a server with a small page and result cap ----------------------------------


@pytest.fixture(scope="module")
def small_server(db_settings) -> Iterator[Server]:
    settings = {"ENGRAM_GRAPH_PAGE_SIZE": "3", "ENGRAM_MAX_RESULTS": "4", "ENGRAM_OBSERVATIONS_PER_ENTITY": "2"}
    with serve(db_settings, **settings) as running:
        yield running.at("memory")


async def test_read_graph_pages_hold_every_entity_and_relation_exactly_once(small_server, tenant):
    names = [f"e{i:02}" for i in range(10)]
    relations = [rel(names[i], names[(i + 1) % 10], "next") for i in range(10)]
    relations += [rel(names[9], names[0], "wraps"), rel(names[4], names[4], "self"), rel(names[0], names[7], "jump")]
    async with small_server.client(tenant) as c:
        ok(await c.call_tool("create_entities", {"entities": [entity(n, "t", f"obs {n}") for n in names]}))
        ok(await c.call_tool("create_relations", {"relations": relations}))

        pages, cursor = [], None
        while True:
            result = await c.call_tool("read_graph", {"cursor": cursor} if cursor else {})
            page = ok(result)
            assert text(result) == pretty(page)
            pages.append(page)
            cursor = page.get("nextCursor")
            if cursor is None:
                assert "note" not in page
                break
            assert len(page["entities"]) == 3 and "read_graph" in page["note"]
        assert len(pages) == 4

        seen_entities = [e["name"] for p in pages for e in p["entities"]]
        seen_relations = [key(r) for p in pages for r in p["relations"]]
        assert sorted(seen_entities) == names  # every entity, once
        assert sorted(seen_relations) == sorted(map(key, relations))  # every relation, once
        assert all(e["observations"] == [f"obs {e['name']}"] for p in pages for e in p["entities"])

        # The same cursor again gives the same page; its own cursor carries the second it was issued
        # in, so it is compared by the page it leads to.
        second_cursor = pages[0]["nextCursor"]
        again = ok(await c.call_tool("read_graph", {"cursor": second_cursor}))
        assert uncursored(again) == uncursored(pages[1])
        assert uncursored(ok(await c.call_tool("read_graph", {"cursor": again["nextCursor"]}))) == uncursored(pages[2])
        forged = second_cursor[:-2] + ("AA" if not second_cursor.endswith("AA") else "BB")
        assert error_code(await c.call_tool("read_graph", {"cursor": forged})) == "invalid"

    async with small_server.client(tenant + "-other") as b:
        # Another tenant's cursor reads nothing of the first tenant's graph.
        assert error_code(await b.call_tool("read_graph", {"cursor": second_cursor})) == "invalid"


async def test_search_and_open_are_capped_and_say_so(small_server, tenant):
    async with small_server.client(tenant) as c:
        names = [f"match {i}" for i in range(6)]
        ok(await c.call_tool("create_entities", {"entities": [entity(n) for n in names]}))
        found = ok(await c.call_tool("search_nodes", {"query": "MATCH"}))
        assert [e["name"] for e in found["entities"]] == names[:4] and "note" in found
        opened = ok(await c.call_tool("open_nodes", {"names": names}))
        assert len(opened["entities"]) == 4 and "note" in opened
        assert "note" not in ok(await c.call_tool("open_nodes", {"names": names[:2]}))


async def test_entities_with_many_observations_are_capped_and_say_so(small_server, tenant):
    async with small_server.client(tenant) as c:
        ok(
            await c.call_tool(
                "create_entities", {"entities": [entity("Busy", "t", *"abcde"), entity("Calm", "t", "x")]}
            )
        )
        for tool, args in [("open_nodes", {"names": ["Busy", "Calm"]}), ("search_nodes", {"query": ""})]:
            graph = ok(await c.call_tool(tool, args))
            assert graph["entities"] == [entity("Busy", "t", "a", "b"), entity("Calm", "t", "x")]
            assert "Busy (+3)" in graph["note"] and "Calm" not in graph["note"]
