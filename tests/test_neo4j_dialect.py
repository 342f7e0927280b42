"""The `neo4j` tool set against PyPI `mcp-neo4j-memory`, case by case.

Each test is one behaviour of the original's Neo4jMemory and tool handlers (names and namespace
prefix, fields, the `{"result": ...}` wrapper and text content, MERGE semantics, missing entities,
cascades, relation selection), or one of Engram's documented differences (docs/tools.md,
"neo4j-memory dialect"), against the /mcp/neo4j endpoint. Two servers of its own: the neo4j set
alone, as the original serves it, and every set at once with the neo4j tools behind a namespace, a
small read_graph page and cap.
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

NAMES = [
    "read_graph",
    "create_entities",
    "create_relations",
    "add_observations",
    "delete_entities",
    "delete_observations",
    "delete_relations",
    "search_memories",
    "find_memories_by_name",
]
# name: (annotation title, description's first sentence, (readOnly, destructive, idempotent), required, item fields)
REFERENCE: dict[str, tuple[str, str, tuple[bool, bool, bool], list[str], set[str] | None]] = {
    "read_graph": (
        "Read Graph",
        "Read the entire knowledge graph with all entities and relationships.",
        (True, False, True),
        [],
        None,
    ),
    "create_entities": (
        "Create Entities",
        "Create multiple new entities in the knowledge graph.",
        (False, False, True),
        ["entities"],
        {"name", "type", "observations"},
    ),
    "create_relations": (
        "Create Relations",
        "Create multiple new relationships between existing entities in the knowledge graph.",
        (False, False, True),
        ["relations"],
        {"source", "target", "relationType"},
    ),
    "add_observations": (
        "Add Observations",
        "Add new observations/facts to existing entities in the knowledge graph.",
        (False, False, True),
        ["observations"],
        {"entityName", "observations"},
    ),
    "delete_entities": (
        "Delete Entities",
        "Delete entities and all their associated relationships from the knowledge graph.",
        (False, True, True),
        ["entityNames"],
        None,
    ),
    "delete_observations": (
        "Delete Observations",
        "Delete specific observations from existing entities in the knowledge graph.",
        (False, True, True),
        ["deletions"],
        {"entityName", "observations"},
    ),
    "delete_relations": (
        "Delete Relations",
        "Delete specific relationships between entities in the knowledge graph.",
        (False, True, True),
        ["relations"],
        {"source", "target", "relationType"},
    ),
    "search_memories": (
        "Search Memories",
        "Search for entities in the knowledge graph",  # the original continues "using fulltext search"
        (True, False, True),
        ["query"],
        None,
    ),
    "find_memories_by_name": (
        "Find Memories by Name",
        "Find specific entities by their exact names",
        (True, False, True),
        ["names"],
        None,
    ),
}


def entity(name: str, entity_type: str = "thing", *observations: str) -> dict[str, Any]:
    return {"name": name, "type": entity_type, "observations": list(observations)}


def rel(source: str, target: str, relation_type: str) -> dict[str, str]:
    return {"source": source, "target": target, "relationType": relation_type}


def key(r: dict[str, str]) -> tuple[str, str, str]:
    return r["source"], r["relationType"], r["target"]


def compact(value: Any) -> str:
    """The original's text of a graph: pydantic's model_dump_json, compact and not ASCII-escaped."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@pytest.fixture(scope="module")
def neo4j_server(db_settings) -> Iterator[Server]:
    with serve(db_settings, ENGRAM_TOOL_SETS="neo4j") as running:
        yield running.at("neo4j")


@pytest.fixture(scope="module")
def every_set_server(db_settings) -> Iterator[Server]:
    with serve(
        db_settings,
        ENGRAM_TOOL_SETS="native,memory,neo4j",
        ENGRAM_NEO4J_NAMESPACE="mem",
        ENGRAM_GRAPH_PAGE_SIZE="3",
        ENGRAM_MAX_RESULTS="4",
    ) as running:
        yield running


async def call(c: Any, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return ok(await c.call_tool(name, args))


async def find(c: Any, *names: str, prefix: str = "") -> dict[str, Any]:
    return await call(c, prefix + "find_memories_by_name", {"names": list(names)})


async def test_tools_have_the_original_names_titles_annotations_and_fields(neo4j_server, tenant):
    async with neo4j_server.client(tenant) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        # The server's instructions name only the tools it serves.
        assert c.instructions is not None and "search_memories" in c.instructions
        assert "upsert_entities" not in c.instructions and "search_nodes" not in c.instructions
    assert set(tools) == set(NAMES)  # the neo4j set alone: nothing else is served
    for name, (title, description, hints, required, item_fields) in REFERENCE.items():
        tool = tools[name]
        a = tool.annotations
        assert a is not None and a.title == title, name
        assert (a.read_only_hint, a.destructive_hint, a.idempotent_hint) == hints, name
        assert a.open_world_hint is False  # the original says True; Engram reaches nothing outside
        assert tool.description is not None and tool.description.startswith(description), name
        schema = tool.input_schema
        assert sorted(schema.get("required", [])) == required, name
        if item_fields:
            item = schema["properties"][required[0]]["items"]
            while "$ref" in item:
                item = schema["$defs"][item["$ref"].rsplit("/", 1)[-1]]
            assert set(item["properties"]) == item_fields == set(item["required"]), name
    entity_schema = tools["create_entities"].input_schema["$defs"]["EntityIn"]["properties"]
    assert entity_schema["type"]["pattern"] == "^[A-Za-z_][A-Za-z0-9_]*$"


async def test_create_entities_merges_an_existing_name_and_returns_what_was_given(neo4j_server, tenant):
    async with neo4j_server.client(tenant) as c:
        given = [entity("Alice", "person", "engineer", "lives in Zürich"), entity("Acme", "company")]
        result = await c.call_tool("create_entities", {"entities": given})
        assert ok(result) == {"result": given}
        assert text(result) == json.dumps(given)  # Python's json.dumps, ASCII-escaped, as the original

        again = [entity("Alice", "robot", "rebuilt", "engineer"), entity("Bob", "person")]
        assert await call(c, "create_entities", {"entities": again}) == {"result": again}
        # The existing entity takes the new type, and its observations become the new ones.
        graph = await find(c, "Alice", "Acme", "Bob")
        assert {e["name"]: e for e in graph["entities"]} == {
            "Alice": entity("Alice", "robot", "engineer", "rebuilt"),
            "Acme": entity("Acme", "company"),
            "Bob": entity("Bob", "person"),
        }


async def test_create_entities_repeated_in_a_batch_end_as_the_last(neo4j_server, tenant):
    async with neo4j_server.client(tenant) as c:
        batch = [entity("Twin", "first", "a"), entity("Twin", "second", "b", "b")]
        assert await call(c, "create_entities", {"entities": batch}) == {"result": batch}
        assert (await find(c, "Twin"))["entities"] == [entity("Twin", "second", "b")]


async def test_create_relations_needs_existing_ends_and_is_not_doubled(neo4j_server, tenant):
    async with neo4j_server.client(tenant) as c:
        await call(c, "create_entities", {"entities": [entity("Alice"), entity("Acme")]})
        works = rel("Alice", "Acme", "WORKS_AT")
        result = await c.call_tool("create_relations", {"relations": [works, works]})
        assert ok(result) == {"result": [works, works]} and text(result) == json.dumps([works, works])
        assert await call(c, "create_relations", {"relations": [works, rel("Acme", "Alice", "EMPLOYS")]})
        graph = await find(c, "Alice")
        assert sorted(map(key, graph["relations"])) == [("Acme", "EMPLOYS", "Alice"), ("Alice", "WORKS_AT", "Acme")]

        # Difference: the original silently drops a relation to a missing entity; Engram refuses the batch.
        refused = await c.call_tool(
            "create_relations", {"relations": [rel("Alice", "Acme", "FOUNDED"), rel("Alice", "Nowhere", "LIVES_IN")]}
        )
        assert error_code(refused) == "not_found"
        assert len((await find(c, "Alice"))["relations"]) == 2
        # Types follow the original's label rule.
        assert (await c.call_tool("create_relations", {"relations": [rel("Alice", "Acme", "works at")]})).is_error


async def test_add_observations_reports_existing_entities_only(neo4j_server, tenant):
    async with neo4j_server.client(tenant) as c:
        await call(c, "create_entities", {"entities": [entity("Alice", "person", "engineer")]})
        result = await c.call_tool(
            "add_observations",
            {
                "observations": [
                    {"entityName": "Alice", "observations": ["engineer", "likes tea"]},
                    {"entityName": "Ghost", "observations": ["boo"]},
                    {"entityName": "Alice", "observations": ["likes tea"]},
                ]
            },
        )
        expected = [
            {"entityName": "Alice", "addedObservations": ["likes tea"]},
            {"entityName": "Alice", "addedObservations": []},
        ]
        assert ok(result) == {"result": expected} and text(result) == json.dumps(expected)
        assert (await find(c, "Alice", "Ghost"))["entities"] == [entity("Alice", "person", "engineer", "likes tea")]
        assert await call(
            c, "add_observations", {"observations": [{"entityName": "Ghost", "observations": ["x"]}]}
        ) == {"result": []}


async def test_deletes_answer_with_the_original_messages_and_ignore_unknowns(neo4j_server, tenant):
    async with neo4j_server.client(tenant) as c:
        await call(c, "create_entities", {"entities": [entity("A", "t", "x", "y"), entity("B"), entity("C", "t", "z")]})
        relations = [rel("A", "B", "R"), rel("B", "C", "R"), rel("C", "A", "R"), rel("A", "C", "R")]
        await call(c, "create_relations", {"relations": relations})

        cases = [
            ("delete_relations", {"relations": [rel("C", "A", "R"), rel("A", "C", "OTHER"), rel("A", "Z", "R")]}),
            ("delete_observations", {"deletions": [{"entityName": "A", "observations": ["x", "X"]}]}),
            ("delete_observations", {"deletions": [{"entityName": "Ghost", "observations": ["x"]}]}),
            ("delete_entities", {"entityNames": ["B", "Ghost"]}),
        ]
        messages = ["Relations", "Observations", "Observations", "Entities"]
        for (name, args), what in zip(cases, messages, strict=True):
            result = await c.call_tool(name, args)
            assert ok(result) == {"result": f"{what} deleted successfully"}
            assert text(result) == f"{what} deleted successfully"

        graph = await call(c, "read_graph", {})
        assert graph == {"entities": [entity("A", "t", "y"), entity("C", "t", "z")], "relations": [rel("A", "C", "R")]}


async def test_search_memories_matches_text_and_returns_touching_relations(neo4j_server, tenant):
    async with neo4j_server.client(tenant) as c:
        await call(
            c,
            "create_entities",
            {
                "entities": [
                    entity("Alice Johnson", "person", "Software engineer"),
                    entity("Microsoft", "company", "makes software"),
                    entity("Seattle", "city"),
                    entity("Bob", "Engineer_Manager"),
                ]
            },
        )
        await call(
            c,
            "create_relations",
            {"relations": [rel("Alice Johnson", "Microsoft", "WORKS_AT"), rel("Alice Johnson", "Seattle", "LIVES_IN")]},
        )
        result = await c.call_tool("search_memories", {"query": "ENGINEER"})
        graph = ok(result)
        assert text(result) == compact(graph)
        assert [e["name"] for e in graph["entities"]] == ["Alice Johnson", "Bob"]
        assert sorted(map(key, graph["relations"])) == [
            ("Alice Johnson", "LIVES_IN", "Seattle"),
            ("Alice Johnson", "WORKS_AT", "Microsoft"),
        ]
        seattle = await call(c, "search_memories", {"query": "seat"})
        assert seattle["relations"] == [rel("Alice Johnson", "Seattle", "LIVES_IN")]  # incoming ones too
        # Difference: a substring, not Lucene syntax (the original would match either word here).
        assert (await call(c, "search_memories", {"query": "engineer software"}))["entities"] == []
        assert (await call(c, "search_memories", {"query": "Software"}))["entities"][1]["name"] == "Microsoft"


async def test_find_memories_by_name_is_exact_with_relations_at_either_end(neo4j_server, tenant):
    async with neo4j_server.client(tenant) as c:
        await call(c, "create_entities", {"entities": [entity(n) for n in ("A", "B", "C")]})
        await call(c, "create_relations", {"relations": [rel("A", "B", "R"), rel("C", "A", "R"), rel("B", "C", "R")]})
        result = await c.call_tool("find_memories_by_name", {"names": ["A", "b", "Missing"]})
        graph = ok(result)
        assert text(result) == compact(graph)
        assert graph["entities"] == [entity("A")]
        assert sorted(map(key, graph["relations"])) == [("A", "R", "B"), ("C", "R", "A")]
        assert await find(c) == {"entities": [], "relations": []}


async def test_read_graph_returns_the_graph_and_its_text(neo4j_server, tenant):
    async with neo4j_server.client(tenant) as c:
        assert await call(c, "read_graph", {}) == {"entities": [], "relations": []}
        await call(c, "create_entities", {"entities": [entity("Zoë", "person", "née 1990"), entity("Acme")]})
        await call(c, "create_relations", {"relations": [rel("Zoë", "Acme", "WORKS_AT")]})
        result = await c.call_tool("read_graph", {})
        graph = ok(result)
        assert graph == {
            "entities": [entity("Acme"), entity("Zoë", "person", "née 1990")],
            "relations": [rel("Zoë", "Acme", "WORKS_AT")],
        }
        assert text(result) == compact(graph)


async def test_concurrent_writers_never_lose_each_others_writes(neo4j_server, tenant):
    async with neo4j_server.client(tenant) as c:
        await call(c, "create_entities", {"entities": [entity("Hub")]})

    async def writer(i: int) -> None:
        async with neo4j_server.client(tenant) as w:
            for j in range(3):
                await call(w, "create_entities", {"entities": [entity(f"n{i}-{j}", "node")]})
                await call(
                    w, "add_observations", {"observations": [{"entityName": "Hub", "observations": [f"{i}-{j}"]}]}
                )
                await call(w, "create_relations", {"relations": [rel(f"n{i}-{j}", "Hub", "FEEDS")]})

    await asyncio.gather(*(writer(i) for i in range(6)))
    async with neo4j_server.client(tenant) as c:
        hub = await find(c, "Hub")
    expected = sorted(f"{i}-{j}" for i in range(6) for j in range(3))
    assert sorted(hub["entities"][0]["observations"]) == expected
    assert sorted(r["source"] for r in hub["relations"]) == [f"n{n}" for n in expected]


async def test_another_tenants_names_are_never_read_changed_or_linked(neo4j_server, tenant):
    other = tenant + "-other"
    async with neo4j_server.client(tenant) as a:
        await call(a, "create_entities", {"entities": [entity("Secret", "plan", "launch on Tuesday")]})
    async with neo4j_server.client(other) as b:
        assert await find(b, "Secret") == {"entities": [], "relations": []}
        assert await call(b, "search_memories", {"query": "Tuesday"}) == {"entities": [], "relations": []}
        assert await call(b, "read_graph", {}) == {"entities": [], "relations": []}
        obs = [{"entityName": "Secret", "observations": ["x"]}]
        assert await call(b, "add_observations", {"observations": obs}) == {"result": []}
        await call(b, "create_entities", {"entities": [entity("Spy")]})
        linked = await b.call_tool("create_relations", {"relations": [rel("Spy", "Secret", "STEALS")]})
        assert error_code(linked) == "not_found"
        await call(b, "delete_observations", {"deletions": [{"entityName": "Secret", "observations": ["x"]}]})
        await call(b, "delete_entities", {"entityNames": ["Secret"]})
        await call(b, "create_entities", {"entities": [entity("Secret", "decoy")]})  # its own, new entity
    async with neo4j_server.client(tenant) as a:
        assert await find(a, "Secret") == {"entities": [entity("Secret", "plan", "launch on Tuesday")], "relations": []}


async def test_invalid_input_is_refused_before_anything_is_saved(neo4j_server, tenant):
    async with neo4j_server.client(tenant) as c:
        bad_calls = [
            ("create_entities", {"entities": [entity("ok"), entity("bad", "not a label")]}),
            ("create_entities", {"entities": [entity("x" * 201)]}),
            ("create_entities", {"entities": [{"name": "ok", "entityType": "t", "observations": []}]}),
            ("create_entities", {"entities": [entity(f"n{i}") for i in range(101)]}),
            ("create_relations", {"relations": [{"from": "a", "to": "b", "relationType": "R"}]}),
            ("add_observations", {"observations": [{"entityName": "ok", "observations": []}]}),
            ("add_observations", {"observations": [{"entityName": "ok", "contents": ["x"]}]}),
            ("search_memories", {"query": ""}),
            ("find_memories_by_name", {"names": "ok"}),
        ]
        for name, args in bad_calls:
            assert (await c.call_tool(name, args)).is_error, (name, args)
        assert await call(c, "read_graph", {}) == {"entities": [], "relations": []}
    async with neo4j_server.client(tenant, scopes=(READ,)) as r:
        with pytest.raises(MCPError):  # answered 403 insufficient_scope at the HTTP layer
            await r.call_tool("create_entities", {"entities": [entity("x")]})


# --- behind a namespace, next to the other sets ---------------------------------------------------


async def test_a_namespace_prefixes_every_tool_with_one_hyphen(every_set_server, tenant):
    async with every_set_server.at("neo4j").client(tenant) as c:
        tools = {t.name for t in (await c.list_tools()).tools}
        assert c.instructions is not None
        assert "mem-search_memories" in c.instructions
        assert not any(name in c.instructions for name in ("search_nodes", "upsert_entities"))
    assert tools == {f"mem-{n}" for n in NAMES}  # the endpoint serves the neo4j set only
    async with every_set_server.at("memory").client(tenant) as c:
        assert {"read_graph", "create_entities", "search_nodes"} <= {t.name for t in (await c.list_tools()).tools}


async def test_types_written_by_other_sets_are_read_back_exactly(every_set_server, tenant):
    """Free-text types from the memory and native sets are returned, not refused by the label rule."""
    async with every_set_server.at("memory").client(tenant) as m, every_set_server.at("neo4j").client(tenant) as c:
        made = {"name": "Ada", "entityType": "person of interest", "observations": ["wrote notes"]}
        await call(
            m, "create_entities", {"entities": [made, {"name": "Acme", "entityType": "company", "observations": []}]}
        )
        await call(m, "create_relations", {"relations": [{"from": "Ada", "to": "Acme", "relationType": "works at"}]})
        expected = {
            "entities": [entity("Acme", "company"), entity("Ada", "person of interest", "wrote notes")],
            "relations": [rel("Ada", "Acme", "works at")],
        }
        assert await call(c, "mem-read_graph", {}) == expected
        assert await find(c, "Ada", "Acme", prefix="mem-") == expected
        assert (await call(c, "mem-search_memories", {"query": "interest"}))["entities"] == [expected["entities"][1]]
        # What was read can be deleted as read, though its type is not a label.
        await call(c, "mem-delete_relations", {"relations": expected["relations"]})
        assert (await call(c, "mem-read_graph", {}))["relations"] == []


async def test_deletes_are_soft_and_restore_entities_brings_them_back(every_set_server, tenant):
    async with every_set_server.at("neo4j").client(tenant) as c, every_set_server.client(tenant) as native:
        await call(c, "mem-create_entities", {"entities": [entity("Alice", "person", "engineer"), entity("Acme")]})
        await call(c, "mem-create_relations", {"relations": [rel("Alice", "Acme", "WORKS_AT")]})
        alice = (await call(native, "get_entity", {"name": "Alice"}))["id"]
        await call(c, "mem-delete_entities", {"entityNames": ["Alice"]})
        assert await find(c, "Alice", "Acme", prefix="mem-") == {"entities": [entity("Acme")], "relations": []}
        await call(native, "restore_entities", {"ids": [alice]})
        assert await find(c, "Alice", prefix="mem-") == {
            "entities": [entity("Alice", "person", "engineer")],
            "relations": [rel("Alice", "Acme", "WORKS_AT")],
        }


async def test_read_graph_pages_hold_every_entity_and_relation_exactly_once(every_set_server, tenant):
    names = [f"e{i}" for i in range(7)]
    relations = [rel(names[i], names[(i * 3) % 7], "LINKS") for i in range(7)] + [rel("e6", "e0", "BACK")]
    async with every_set_server.at("neo4j").client(tenant) as c:
        await call(c, "mem-create_entities", {"entities": [entity(n) for n in names]})
        await call(c, "mem-create_relations", {"relations": relations})
        pages, cursor = [], None
        while True:
            result = await c.call_tool("mem-read_graph", {"cursor": cursor} if cursor else {})
            page = ok(result)
            assert text(result) == compact(page)
            pages.append(page)
            if (cursor := page.get("nextCursor")) is None:
                break
            assert "mem-read_graph" in page["note"]
        assert [len(p["entities"]) for p in pages] == [3, 3, 1]
        assert sorted(e["name"] for p in pages for e in p["entities"]) == names
        assert sorted(key(r) for p in pages for r in p["relations"]) == sorted(map(key, relations))

        capped = await call(c, "mem-search_memories", {"query": "E"})
        assert len(capped["entities"]) == 4 and "note" in capped
