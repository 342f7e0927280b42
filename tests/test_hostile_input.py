"""Hostile input, through the SDK's real client over HTTP: every case gets a clear error and changes nothing.

One server with every endpoint (native at /mcp, `memory` at /mcp/memory, `neo4j` at /mcp/neo4j
behind the prefix `neo-` so that every tool name is unique here), one seeded tenant; each tool is
called at its own endpoint. Each case calls one tool, asserts the error code (never an internal error), and
compares a snapshot of the tenant's entities, vertices, observations, relations and history
before and after. String arguments are found by walking each tool's published input schema, so a
new tool or field is covered as soon as it appears (and the catalogue of valid arguments below
must name it).
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import asyncpg
import httpx2
import pytest
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult

from app.auth.principal import ADMIN, READ, WRITE
from tests.support.client import ok
from tests.support.server import Server, serve

SCOPES = (READ, WRITE, ADMIN)
SETS = ("native", "memory", "neo4j")  # the endpoints this catalogue covers (tests/test_chatgpt.py: chatgpt)
NUL = "bad\x00text"


@pytest.fixture(scope="module")
def hostile_server(db_settings) -> Iterator[Server]:
    with serve(
        db_settings,
        ENGRAM_TOOL_SETS=",".join(SETS),
        ENGRAM_NEO4J_NAMESPACE="neo",
        ENGRAM_EMBEDDING_PROVIDER="none",
    ) as running:
        yield running


class Endpoints:
    """Clients of every endpoint of one server, for one tenant: each tool is called where it is served."""

    def __init__(self, by_tool: dict[str, Any], native: Any) -> None:
        self.by_tool = by_tool
        self.native = native

    async def call_tool(self, name: str, args: Any) -> CallToolResult:
        return await self.by_tool[name].call_tool(name, args)

    async def read_resource(self, uri: str) -> Any:
        return await self.native.read_resource(uri)

    async def list_tools(self) -> list[Any]:
        return [t for c in {id(c): c for c in self.by_tool.values()}.values() for t in (await c.list_tools()).tools]


@asynccontextmanager
async def clients(server: Server, tenant: str, scopes: tuple[str, ...]) -> AsyncIterator[Endpoints]:
    async with AsyncExitStack() as stack:
        by_set = {s: await stack.enter_async_context(server.at(s).client(tenant, scopes)) for s in SETS}
        by_tool = {t.name: c for c in by_set.values() for t in (await c.list_tools()).tools}
        assert len(by_tool) == sum([len((await c.list_tools()).tools) for c in by_set.values()])  # names unique
        yield Endpoints(by_tool, by_set["native"])


@dataclass
class Seeded:
    tenant: str
    schema: str
    ids: dict[str, str]  # entity name -> id
    relation_id: str
    episode_id: int
    cursors: dict[str, str]  # listing -> a real cursor of this tenant
    tools: dict[str, dict[str, Any]]  # tool name -> input schema


async def _seed(server: Server, tenant: str) -> Seeded:
    async with clients(server, tenant, SCOPES) as c:
        made = ok(
            await c.call_tool(
                "upsert_entities",
                {
                    "entities": [
                        {"name": "Ada", "type": "person", "observations": ["o1", "o2"], "area": "a", "topic": "t"},
                        {"name": "Acme", "type": "org", "observations": ["o1"], "properties": {"k": "v"}},
                        {"name": "Gone", "type": "thing"},
                        *({"name": f"Filler {i}", "type": "thing", "area": "a"} for i in range(3)),
                    ]
                },
            )
        )
        ids = {r["name"]: r["id"] for r in made["results"]}
        rel = ok(
            await c.call_tool("connect_entities", {"relations": [{"from": "Ada", "to": "Acme", "type": "works at"}]})
        )
        ok(await c.call_tool("remove_entities", {"entities": ["Gone"]}))
        ok(await c.call_tool("append_observations", {"items": [{"entity": "Ada", "observations": ["o3"]}]}))
        ok(await c.call_tool("add_aliases", {"name": "Ada", "aliases": ["Enchantress"]}))
        episodes = ok(
            await c.call_tool(
                "add_episodes",
                {"episodes": [{"text": f"Ada said filler thing {i}", "speakers": ["Ada"]} for i in range(2)]},
            )
        )
        cursors = {
            "find": ok(await c.call_tool("find_entities", {"limit": 1}))["next_cursor"],
            "history": ok(await c.call_tool("entity_history", {"name": "Ada", "limit": 1}))["next_cursor"],
            "search": ok(await c.call_tool("search", {"query": "Filler", "mode": "keyword", "limit": 1}))[
                "next_cursor"
            ],
            "audit": ok(await c.call_tool("audit_log", {"limit": 1}))["next_cursor"],
            "duplicates": ok(await c.call_tool("find_duplicates", {"limit": 1}))["next_cursor"],
            "recall": ok(await c.call_tool("recall", {"query": "Filler", "mode": "keyword", "limit": 1}))[
                "next_cursor"
            ],
            "episodes": ok(await c.call_tool("list_episodes", {"limit": 1}))["next_cursor"],
        }
        tools = {t.name: t.input_schema for t in await c.list_tools()}
    assert all(cursors.values()), cursors
    relation_id = rel["results"][0]["relation"]["id"]
    return Seeded(tenant, "", ids, relation_id, episodes["episodes"][0]["id"], cursors, tools)


@pytest.fixture(scope="module")
async def admin(db_settings) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(db_settings.admin_dsn())
    yield conn
    await conn.close()


async def _schema(admin: asyncpg.Connection, tenant: str) -> str:
    return await admin.fetchval("SELECT schema_name FROM engram.tenants WHERE key = $1", tenant)


@pytest.fixture(scope="module")
async def seeded(hostile_server, admin) -> Seeded:
    s = await _seed(hostile_server, f"hostile-{uuid.uuid4().hex[:8]}")
    s.schema = await _schema(admin, s.tenant)
    return s


async def snapshot(admin: asyncpg.Connection, schema: str) -> dict[str, list[tuple[Any, ...]]]:
    """Everything a tool could change in one tenant."""
    queries = {
        "entities": f"SELECT id, name, type, description, area, topic, subtopic, certainty, properties::text, version,"
        f" deleted_at IS NULL FROM {schema}.entities ORDER BY id",
        "vertices": f'SELECT id::text, ag_catalog.agtype_out(properties)::text FROM {schema}."Entity" ORDER BY id',
        "observations": f"SELECT id, entity_id, content, source, valid_from, valid_until FROM {schema}.observations"
        " ORDER BY id",
        "intervals": f"SELECT edge::text, valid_from, valid_until FROM {schema}.rel_intervals ORDER BY edge",
        "relations": "SELECT id::text, start_id::text, end_id::text, ag_catalog.agtype_out(properties)::text"
        f' FROM {schema}."REL" ORDER BY id',
        "history": f"SELECT count(*), max(id) FROM {schema}.history",
        "aliases": f"SELECT alias_key, alias, entity_id FROM {schema}.aliases ORDER BY alias_key",
        "merged": f"SELECT id, merged_into FROM {schema}.entities WHERE merged_into IS NOT NULL ORDER BY id",
        "episodes": f"SELECT id, content, at, source, valid_from, valid_until, ended_why FROM {schema}.episodes"
        " ORDER BY id",
        "episode_entities": f"SELECT * FROM {schema}.episode_entities ORDER BY 1, 2",
        "labels": "SELECT l.name::text FROM ag_catalog.ag_label l JOIN ag_catalog.ag_graph g ON g.graphid = l.graph"
        f" WHERE g.name = '{schema}' ORDER BY 1",
    }
    return {name: [tuple(r) for r in await admin.fetch(q)] for name, q in queries.items()}


def outcome(result: CallToolResult) -> str:
    """`ok`, the error's code (`invalid`, `not_found`, ...), or `internal` for an error without one."""
    if not result.is_error:
        return "ok"
    text = result.content[0].text  # type: ignore[union-attr]
    rest = text.split("Error executing tool ", 1)[-1].split(": ", 2)
    if len(rest) < 2:
        return "internal"
    return rest[1] if rest[1].isidentifier() else "unclear"


async def check(c: Any, admin: asyncpg.Connection, schemas: list[str], tool: str, args: Any, expect: set[str]) -> None:
    """Call `tool` with `args` on client `c`: the outcome is one of `expect`, and no tenant in `schemas` changed."""
    before = [await snapshot(admin, s) for s in schemas]
    result = await c.call_tool(tool, args)
    got = outcome(result)
    assert got in expect, (tool, args, got, result.content[0].text[:300])  # type: ignore[union-attr]
    assert [await snapshot(admin, s) for s in schemas] == before, (tool, args)


# --- valid arguments for every tool: the cases below spoil one field at a time ---------------------


def catalogue(s: Seeded) -> dict[str, dict[str, Any]]:
    ada = s.ids["Ada"]
    props = {"k": "v", "n": 1}
    return {
        "upsert_entities": {
            "entities": [
                {
                    "name": "Ada",
                    "type": "person",
                    "description": "d",
                    "observations": ["o9"],
                    "area": "a",
                    "topic": "t",
                    "subtopic": "s",
                    "certainty": 5,
                    "properties": props,
                    "valid_from": "2020-01-01T00:00:00Z",
                    "valid_until": "2100-01-01T00:00:00Z",
                }
            ],
            "on_existing": "merge",
            "source": "a document",
        },
        "get_entity": {"name": "Ada", "as_of": "2020-01-01T00:00:00Z"},
        "update_entity": {
            "name": "Ada",
            "changes": {
                "name": "Ada 2",
                "type": "x",
                "description": "d",
                "area": "a2",
                "topic": "t",
                "subtopic": "s",
                "properties": props,
                "unset_properties": ["k"],
                "clear": ["certainty"],
            },
        },
        "remove_entities": {"entities": ["Ada"]},
        "purge_entities": {"entities": ["Ada"], "episodes": "keep"},
        "erase_private_memory": {"subject": "someone-else", "issuer": "https://issuer.example"},
        "restore_entities": {"ids": [s.ids["Gone"]]},
        "append_observations": {
            "items": [
                {
                    "entity": "Ada",
                    "observations": ["new"],
                    "valid_from": "2020-01-01T00:00:00Z",
                    "valid_until": "2100-01-01T00:00:00Z",
                    "source": "a document",
                }
            ]
        },
        "invalidate_observations": {
            "items": [{"entity": "Ada", "observations": ["o1"]}],
            "at": "2100-01-01T00:00:00Z",
            "reason": "moved",
        },
        "remove_observations": {"items": [{"entity": "Ada", "observations": ["o1"]}]},
        "pin_facts": {"items": [{"entity": "Ada", "observations": ["o1"]}]},
        "unpin_facts": {"items": [{"entity": ada, "observations": ["o1"]}]},
        "entity_history": {"name": "Ada"},
        "find_entities": {
            "name_contains": "Ad",
            "text_contains": "o",
            "types": ["person"],
            "area": "a",
            "topic": "t",
            "subtopic": "s",
            "created_after": "2000-01-01T00:00:00Z",
            "created_before": "2100-01-01T00:00:00Z",
            "sources": ["a document"],
            "since": "2000-01-01T00:00:00Z",
            "until": "2100-01-01T00:00:00Z",
            "as_of": "2020-01-01T00:00:00Z",
            "sort": "name",
        },
        "connect_entities": {
            "relations": [
                {
                    "from": "Ada",
                    "to": "Acme",
                    "type": "likes",
                    "notes": "n",
                    "strength": 0.5,
                    "properties": props,
                    "source": "a document",
                    "valid_from": "2020-01-01T00:00:00Z",
                }
            ]
        },
        "invalidate_relations": {
            "relations": [{"from": "Ada", "to": "Acme", "type": "works at"}],
            "ids": [s.relation_id],
            "at": "2100-01-01T00:00:00Z",
            "reason": "left",
        },
        "disconnect_entities": {
            "relations": [{"from": "Ada", "to": "Acme", "type": "works at"}],
            "ids": [s.relation_id],
        },
        "search": {
            "query": "Ada",
            "mode": "keyword",
            "types": ["person"],
            "area": "a",
            "topic": "t",
            "sources": ["a document"],
            "since": "2000-01-01T00:00:00Z",
            "until": "2100-01-01T00:00:00Z",
            "as_of": "2020-01-01T00:00:00Z",
        },
        "neighbors": {
            "entity": "Ada",
            "direction": "both",
            "relation_types": ["works at"],
            "as_of": "2020-01-01T00:00:00Z",
        },
        "shortest_path": {
            "from": "Ada",
            "to": "Acme",
            "direction": "out",
            "relation_types": ["works at"],
            "as_of": "2020-01-01T00:00:00Z",
        },
        "relation_chain": {
            "entity": "Ada",
            "relation_type": "works at",
            "direction": "out",
            "as_of": "2020-01-01T00:00:00Z",
        },
        "subgraph": {"entities": ["Ada", ada], "as_of": "2020-01-01T00:00:00Z"},
        "recall": {
            "query": "Ada",
            "mode": "keyword",
            "types": ["person"],
            "sources": ["a document"],
            "since": "2000-01-01T00:00:00Z",
            "until": "2100-01-01T00:00:00Z",
            "as_of": "2020-01-01T00:00:00Z",
        },
        "add_episodes": {
            "episodes": [
                {
                    "text": "Ada met Acme",
                    "at": "2020-01-01T00:00:00Z",
                    "source": "chat",
                    "speakers": ["Ada"],
                    "participants": ["Acme"],
                    "valid_from": "2020-01-01T00:00:00Z",
                    "valid_until": "2100-01-01T00:00:00Z",
                }
            ],
            "source": "a document",
        },
        "list_episodes": {
            "entity": "Ada",
            "sources": ["chat"],
            "since": "2000-01-01T00:00:00Z",
            "until": "2100-01-01T00:00:00Z",
            "as_of": "2020-01-01T00:00:00Z",
        },
        "invalidate_episodes": {"ids": [s.episode_id], "at": "2100-01-01T00:00:00Z", "reason": "retracted"},
        "remove_episodes": {"ids": [s.episode_id]},
        "hierarchy": {},
        "graph_stats": {},
        "query_graph": {"query": "MATCH (n:Entity)-[r:REL]->(m) WHERE n.name = 'Ada' RETURN n.name, r.type, m"},
        "server_status": {},
        "audit_log": {"tool_name": "upsert_entities"},
        "merge_entities": {"into": "Ada", "merge": ["Acme"], "properties_rule": "merged", "allow_type_mismatch": True},
        "add_aliases": {"name": "Ada", "aliases": ["Countess"]},
        "remove_aliases": {"name": "Ada", "aliases": ["Countess"]},
        "find_duplicates": {"types": ["person"], "limit": 5},
        "create_entities": {"entities": [{"name": "Ada", "entityType": "person", "observations": ["o1"]}]},
        "create_relations": {"relations": [{"from": "Ada", "to": "Acme", "relationType": "likes"}]},
        "add_observations": {"observations": [{"entityName": "Ada", "contents": ["c"]}]},
        "delete_entities": {"entityNames": ["Ada"]},
        "delete_observations": {"deletions": [{"entityName": "Ada", "observations": ["o1"]}]},
        "delete_relations": {"relations": [{"from": "Ada", "to": "Acme", "relationType": "works at"}]},
        "read_graph": {},
        "search_nodes": {"query": "Ada"},
        "open_nodes": {"names": ["Ada"]},
        "neo-create_entities": {"entities": [{"name": "Ada", "type": "person", "observations": ["o1"]}]},
        "neo-create_relations": {"relations": [{"source": "Ada", "target": "Acme", "relationType": "LIKES"}]},
        "neo-add_observations": {"observations": [{"entityName": "Ada", "observations": ["c"]}]},
        "neo-delete_entities": {"entityNames": ["Ada"]},
        "neo-delete_observations": {"deletions": [{"entityName": "Ada", "observations": ["o1"]}]},
        "neo-delete_relations": {"relations": [{"source": "Ada", "target": "Acme", "relationType": "works at"}]},
        "neo-read_graph": {},
        "neo-search_memories": {"query": "Ada"},
        "neo-find_memories_by_name": {"names": ["Ada"]},
    }


ONE_OF = {"id": "name", "name": "id"}  # get_entity, update_entity, entity_history take exactly one


def string_paths(schema: dict[str, Any]) -> Iterator[tuple[Any, ...]]:
    """Every place a string goes in arguments of this input schema, lists as their first item."""
    defs = schema.get("$defs", {})

    def walk(node: dict[str, Any], path: tuple[Any, ...]) -> Iterator[tuple[Any, ...]]:
        if "$ref" in node:
            node = defs[node["$ref"].rsplit("/", 1)[-1]]
        for branch in node.get("anyOf", []):
            yield from walk(branch, path)
        kind = node.get("type")
        if kind == "string":
            yield path
        elif kind == "array":
            yield from walk(node.get("items", {}), (*path, 0))
        elif kind == "object":
            for key, child in node.get("properties", {}).items():
                yield from walk(child, (*path, key))

    yield from dict.fromkeys(walk(schema, ()))


def put(args: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(args)
    if len(path) == 1 and path[0] in ONE_OF:
        out.pop(ONE_OF[path[0]], None)
    node: Any = out
    for part in path[:-1]:
        node = node[part]  # the catalogue holds every container a string sits in
    node[path[-1]] = value
    return out


async def test_the_catalogue_names_every_tool(seeded):
    assert set(catalogue(seeded)) == set(seeded.tools)
    assert all(string_paths(seeded.tools[t]) for t in ("upsert_entities", "neo-read_graph", "search"))


async def test_nul_in_any_string_argument_is_invalid(hostile_server, admin, seeded):
    """NUL (which PostgreSQL cannot store) in every string of every tool: `invalid`, nothing changes."""
    cases = [(tool, path) for tool, schema in sorted(seeded.tools.items()) for path in string_paths(schema)]
    assert len(cases) >= 100
    base = catalogue(seeded)
    async with clients(hostile_server, seeded.tenant, SCOPES) as c:
        for tool, path in cases:
            await check(c, admin, [seeded.schema], tool, put(base[tool], path, NUL), {"invalid"})


async def test_an_unknown_argument_is_invalid_for_every_tool(hostile_server, admin, seeded):
    """A misspelt or invented argument is refused, not dropped: a call that meant `valid_until` but
    wrote `valid_untill` must not end a fact now. Every tool, at its endpoint; nothing changes. (The
    native listing, compact, leaves closedness to this refusal: docs/tools.md.)"""
    base = catalogue(seeded)
    async with clients(hostile_server, seeded.tenant, SCOPES) as c:
        for tool in sorted(seeded.tools):
            await check(c, admin, [seeded.schema], tool, {**base[tool], "valid_untill": "2020-01-01"}, {"invalid"})


NON_CANONICAL = [
    lambda i: "{" + i + "}",
    lambda i: "urn:uuid:" + i,
    lambda i: i.upper(),
    lambda i: i.replace("-", ""),
    lambda i: i[:8] + "-" + i[9:].replace("-", ""),
]


@pytest.mark.parametrize("spell", range(len(NON_CANONICAL)))
async def test_non_canonical_uuids_address_nothing(hostile_server, admin, seeded, spell):
    """Ids are the lowercase 8-4-4-4-12 form only: elsewhere `invalid`, and where a name may stand, no entity."""
    odd = NON_CANONICAL[spell]
    ada, gone, rel = odd(seeded.ids["Ada"]), odd(seeded.ids["Gone"]), odd(seeded.relation_id)
    invalid = {
        "get_entity": {"id": ada},
        "entity_history": {"id": ada},
        "update_entity": {"id": ada, "changes": {"type": "x"}},
        "restore_entities": {"ids": [gone]},
        "disconnect_entities": {"ids": [rel]},
        "add_aliases": {"id": ada, "aliases": ["x"]},
        "remove_aliases": {"id": ada, "aliases": ["x"]},
    }
    not_found = {
        "get_entity": {"name": ada},
        "neighbors": {"entity": ada},
        "relation_chain": {"entity": ada, "relation_type": "works at"},
        "remove_entities": {"entities": [ada]},
        "append_observations": {"items": [{"entity": ada, "observations": ["x"]}]},
        "connect_entities": {"relations": [{"from": ada, "to": "Acme", "type": "t"}]},
        "shortest_path": {"from": ada, "to": "Acme"},
        "subgraph": {"entities": [ada]},
        "add_observations": {"observations": [{"entityName": ada, "contents": ["x"]}]},
        "merge_entities": {"into": "Ada", "merge": [ada]},
        "add_aliases": {"name": ada, "aliases": ["x"]},
    }
    ignored = {
        "delete_entities": {"entityNames": [ada]},
        "neo-delete_entities": {"entityNames": [ada]},
        "open_nodes": {"names": [ada]},
        "disconnect_entities": {"relations": [{"from": ada, "to": "Acme", "type": "works at"}]},
    }
    async with clients(hostile_server, seeded.tenant, SCOPES) as c:
        for expect, cases in (({"invalid"}, invalid), ({"not_found"}, not_found), ({"ok"}, ignored)):
            for tool, args in cases.items():
                await check(c, admin, [seeded.schema], tool, args, expect)


def _spoiled_cursors(seeded: Seeded) -> list[str]:
    real = seeded.cursors["find"]
    body, _, mac = real.partition(".")
    return [
        f"{body}.{mac[:-1]}é",
        f"{body}.ü",
        "abc.é",
        "é.é",
        f"{body}é.{mac}",
        f"{body}.{mac}\n",
        f"{body}.{mac}.{mac}",
        ".",
        "x" * 1001,
        f"{body}\u202e.{mac}",
        f"{body[:-4]}AAAA.{mac}",
    ]


async def test_spoiled_cursors_are_invalid(hostile_server, admin, seeded):
    listings = {
        "find_entities": {},
        "entity_history": {"name": "Ada"},
        "search": {"query": "Filler", "mode": "keyword"},
        "recall": {"query": "Filler", "mode": "keyword"},
        "list_episodes": {},
        "audit_log": {},
        "find_duplicates": {},
        "read_graph": {},
        "neo-read_graph": {},
    }
    async with clients(hostile_server, seeded.tenant, SCOPES) as c:
        for cursor in _spoiled_cursors(seeded):
            for tool, args in listings.items():
                await check(c, admin, [seeded.schema], tool, {**args, "cursor": cursor}, {"invalid"})


def _nested(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for i in range(depth):
        value = {"k": value} if i % 2 else [value]
    return value


BAD_PROPERTIES = [
    {"n": 2**64},
    {"n": 2**63},
    {"n": -(2**63) - 1},
    {"n": 10**40},
    {"deep": {"er": [2**70]}},
    {"n": 9.3e18},
    {"n": -1e300},
    {"n": 2.0**63},
    {"k\x00": 1},
    {"k": "v\x00"},
    {"k": {"n": ["x\x00"]}},
    {"k": [{"\x00": 1}]},
    {"d": _nested(32)},
    {"d": _nested(64)},
    {"d": _nested(120)},
]


@pytest.mark.parametrize("index", range(len(BAD_PROPERTIES)))
async def test_properties_that_no_store_keeps_exactly_are_invalid(hostile_server, admin, seeded, index):
    props = BAD_PROPERTIES[index]
    cases = {
        "upsert_entities": {"entities": [{"name": "Ada", "type": "person", "properties": props}]},
        "update_entity": {"name": "Ada", "changes": {"properties": props}},
        "connect_entities": {"relations": [{"from": "Ada", "to": "Acme", "type": "likes", "properties": props}]},
    }
    async with clients(hostile_server, seeded.tenant, SCOPES) as c:
        for tool, args in cases.items():
            await check(c, admin, [seeded.schema], tool, args, {"invalid"})


async def test_properties_at_the_bounds_are_kept_exactly(hostile_server, seeded, tenant):
    props = {"max": 2**63 - 1, "min": -(2**63), "big": 9.2e18, "nest": _nested(31), "text": "zoë ✓ 𝄞"}
    async with clients(hostile_server, tenant, SCOPES) as c:
        made = ok(
            await c.call_tool("upsert_entities", {"entities": [{"name": "Bounds", "type": "t", "properties": props}]})
        )
        got = ok(await c.call_tool("get_entity", {"id": made["results"][0]["id"]}))
    assert got["properties"] == props


async def test_huge_numbers_in_arguments_are_invalid(hostile_server, admin, seeded):
    cases = [
        ("find_entities", {"limit": 2**64}),
        ("find_entities", {"certainty_min": 2**70}),
        ("get_entity", {"name": "Ada", "max_observations": 2**63}),
        ("update_entity", {"name": "Ada", "expected_version": 2**64, "changes": {"type": "x"}}),
        ("upsert_entities", {"entities": [{"name": "Ada", "type": "p", "certainty": 10**30}]}),
        ("neighbors", {"entity": "Ada", "depth": -(2**70)}),
        ("connect_entities", {"relations": [{"from": "Ada", "to": "Acme", "type": "t", "strength": 1e308}]}),
        ("search", {"query": "Ada", "mode": "keyword", "min_score": 2.0**64}),
        ("find_duplicates", {"limit": 2**64}),
        ("query_graph", {"query": "RETURN 1", "limit": 2**64}),
        ("query_graph", {"query": "RETURN 99999999999999999999999"}),
        ("merge_entities", {"into": "Ada", "merge": ["Acme"], "expected_version": 2**64}),
    ]
    async with clients(hostile_server, seeded.tenant, SCOPES) as c:
        for tool, args in cases:
            await check(c, admin, [seeded.schema], tool, args, {"invalid"})


async def test_nan_and_infinity_are_invalid(hostile_server, admin, seeded):
    """JSON has no NaN, but the server's parser takes the literals: sent as raw JSON-RPC over HTTP."""
    cases = [
        ("upsert_entities", '{"entities": [{"name": "Ada", "type": "p", "properties": {"n": %s}}]}'),
        ("update_entity", '{"name": "Ada", "changes": {"properties": {"n": [%s]}}}'),
        ("connect_entities", '{"relations": [{"from": "Ada", "to": "Acme", "type": "t", "strength": %s}]}'),
        ("connect_entities", '{"relations": [{"from": "Ada", "to": "Acme", "type": "t", "properties": {"n": %s}}]}'),
        ("search", '{"query": "Ada", "mode": "keyword", "min_score": %s}'),
    ]
    headers = {
        "Authorization": f"Bearer {hostile_server.token(seeded.tenant, SCOPES)}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": "2025-11-25",
    }
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        for literal in ("NaN", "Infinity", "-Infinity"):
            for tool, template in cases:
                before = await snapshot(admin, seeded.schema)
                body = '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "%s", "arguments": %s}}'
                answer = await http.post(hostile_server.url, content=body % (tool, template % literal))
                assert answer.status_code == 200, answer.text
                result = CallToolResult.model_validate(answer.json()["result"])
                assert outcome(result) == "invalid", (tool, literal, result.content)
                assert await snapshot(admin, seeded.schema) == before


async def test_merge_alias_and_duplicate_tools_refuse_oversized_and_mistyped_arguments(hostile_server, admin, seeded):
    many = [f"E{i}" for i in range(21)]
    cases = [
        ("merge_entities", {"into": "Ada", "merge": many}),
        ("merge_entities", {"into": "Ada", "merge": []}),
        ("merge_entities", {"into": "Ada", "merge": "Acme"}),
        ("merge_entities", {"into": "Ada", "merge": [["Acme"]]}),
        ("merge_entities", {"into": "Ada", "merge": [_nested(120, "Acme")]}),
        ("merge_entities", {"into": {"name": "Ada"}, "merge": ["Acme"]}),
        ("merge_entities", {"into": "x" * 201, "merge": ["Acme"]}),
        ("merge_entities", {"into": "Ada", "merge": ["Acme"], "properties_rule": "newest"}),
        ("merge_entities", {"into": "Ada", "merge": ["Acme"], "allow_type_mismatch": [1]}),
        ("merge_entities", {"into": "Ada", "merge": ["Acme"], "expected_version": 0}),
        ("merge_entities", {"into": "Ada", "merge": ["Acme"], "extra": 1}),
        ("add_aliases", {"name": "Ada", "aliases": [f"A{i}" for i in range(51)]}),
        ("add_aliases", {"name": "Ada", "aliases": []}),
        ("add_aliases", {"name": "Ada", "aliases": ["  "]}),
        ("add_aliases", {"name": "Ada", "aliases": ["x" * 201]}),
        ("add_aliases", {"name": "Ada", "aliases": "Countess"}),
        ("add_aliases", {"name": "Ada", "aliases": [{"alias": "Countess"}]}),
        ("add_aliases", {"name": "Ada", "aliases": [_nested(64, "x")]}),
        ("add_aliases", {"name": "Ada", "id": seeded.ids["Ada"], "aliases": ["x"]}),
        ("add_aliases", {"aliases": ["x"]}),
        ("remove_aliases", {"name": "Ada", "aliases": [7]}),
        ("remove_aliases", {"name": "Ada", "aliases": [None]}),
        ("find_duplicates", {"limit": 0}),
        ("find_duplicates", {"types": [f"t{i}" for i in range(21)]}),
        ("find_duplicates", {"types": "person"}),
        ("find_duplicates", {"types": [_nested(40, "person")]}),
        ("find_duplicates", {"cursor": 12}),
    ]
    async with hostile_server.client(seeded.tenant, SCOPES) as c:
        for tool, args in cases:
            await check(c, admin, [seeded.schema], tool, args, {"invalid"})


@pytest.mark.parametrize("name", ["null", "true", "false", "[1]", "{}", "123", '"quoted"', "[]"])
async def test_names_that_look_like_json_are_names(hostile_server, tenant, name):
    """The SDK JSON-decodes string arguments typed other than `str`; optional strings must not be."""
    async with clients(hostile_server, tenant, SCOPES) as c:
        made = ok(await c.call_tool("upsert_entities", {"entities": [{"name": name, "type": "t", "area": name}]}))
        eid = made["results"][0]["id"]
        assert ok(await c.call_tool("get_entity", {"name": name}))["id"] == eid
        assert ok(await c.call_tool("entity_history", {"name": name}))["entity"]["id"] == eid
        ok(await c.call_tool("update_entity", {"name": name, "changes": {"description": "found"}}))
        listed = ok(await c.call_tool("find_entities", {"name_contains": name, "area": name}))
        assert [e["id"] for e in listed["entities"]] == [eid]
        assert ok(await c.call_tool("search", {"query": "x", "mode": "keyword", "area": name}))["hits"] == []
        assert [e["name"] for e in ok(await c.call_tool("open_nodes", {"names": [name]}))["entities"]] == [name]
        assert ok(await c.call_tool("get_entity", {"id": eid}))["description"] == "found"


@pytest.mark.parametrize(
    "claim",
    [
        "acme\n",
        "acme\r\n",
        "ac\x00me",
        "a" * 201,
        "-acme",
        "acme tenant",
        "\uff41\uff43\uff4d\uff45",
        "acme/../b",
        "t\u202e",
    ],
)
async def test_malformed_tenant_claims_are_forbidden_and_create_nothing(hostile_server, admin, claim):
    tenants = await admin.fetchval("SELECT count(*) FROM engram.tenants")
    async with clients(hostile_server, claim, SCOPES) as c:
        for tool, args in (
            ("get_entity", {"name": "Ada"}),
            ("upsert_entities", {"entities": [{"name": "A", "type": "t"}]}),
            ("read_graph", {}),
            ("server_status", {}),
        ):
            assert outcome(await c.call_tool(tool, args)) == "forbidden", tool
        with pytest.raises(MCPError):  # resources answer with a protocol error
            await c.read_resource("memory://knowledge-graph")
    assert await admin.fetchval("SELECT count(*) FROM engram.tenants") == tenants


async def test_another_tenant_reaches_nothing_with_this_tenants_ids_names_and_cursors(hostile_server, admin, seeded):
    """Tenant B with A's ids, names and cursors on every tool: `not_found`, `invalid` or empty; A is untouched."""
    other = seeded.tenant + "-b"
    async with clients(hostile_server, other, SCOPES) as b:
        ok(
            await b.call_tool(
                "upsert_entities", {"entities": [{"name": "B0", "type": "t"}, {"name": "B1", "type": "t"}]}
            )
        )
        own_cursor = ok(await b.call_tool("find_entities", {"limit": 1}))["next_cursor"]
    schemas = [seeded.schema, await _schema(admin, other)]
    a, cur = seeded.ids, seeded.cursors
    cases: list[tuple[str, dict[str, Any], set[str]]] = [
        ("get_entity", {"id": a["Ada"]}, {"not_found"}),
        ("get_entity", {"name": "Ada"}, {"not_found"}),
        ("entity_history", {"id": a["Gone"]}, {"not_found"}),
        ("update_entity", {"id": a["Acme"], "changes": {"type": "stolen"}}, {"not_found"}),
        ("update_entity", {"name": "acme", "changes": {"type": "stolen"}}, {"not_found"}),
        ("remove_entities", {"entities": [a["Acme"], "B0"]}, {"not_found"}),
        ("restore_entities", {"ids": [a["Gone"]]}, {"not_found"}),
        ("append_observations", {"items": [{"entity": a["Acme"], "observations": ["planted"]}]}, {"not_found"}),
        ("remove_observations", {"items": [{"entity": "Ada", "observations": ["o1"]}]}, {"not_found"}),
        ("pin_facts", {"items": [{"entity": a["Ada"], "observations": ["o1"]}]}, {"not_found"}),
        ("unpin_facts", {"items": [{"entity": "Ada", "observations": ["o1"]}]}, {"not_found"}),
        ("connect_entities", {"relations": [{"from": "B0", "to": a["Acme"], "type": "steals"}]}, {"not_found"}),
        ("disconnect_entities", {"ids": [seeded.relation_id]}, {"ok"}),
        ("merge_entities", {"into": "B0", "merge": [a["Acme"]]}, {"not_found"}),
        ("merge_entities", {"into": a["Ada"], "merge": ["B1"]}, {"not_found"}),
        ("merge_entities", {"into": "B0", "merge": ["Ada"]}, {"not_found"}),
        ("add_aliases", {"id": a["Ada"], "aliases": ["stolen"]}, {"not_found"}),
        ("remove_aliases", {"id": a["Ada"], "aliases": ["o1"]}, {"not_found"}),
        ("find_duplicates", {"cursor": cur["duplicates"]}, {"invalid"}),
        ("recall", {"query": "Filler", "mode": "keyword", "limit": 1, "cursor": cur["recall"]}, {"invalid"}),
        ("list_episodes", {"limit": 1, "cursor": cur["episodes"]}, {"invalid"}),
        ("list_episodes", {"entity": "Ada"}, {"not_found"}),
        ("add_episodes", {"episodes": [{"text": "planted", "speakers": [a["Ada"]]}]}, {"not_found"}),
        ("invalidate_episodes", {"ids": [seeded.episode_id]}, {"ok"}),
        ("remove_episodes", {"ids": [seeded.episode_id]}, {"ok"}),
        ("disconnect_entities", {"relations": [{"from": "Ada", "to": "Acme", "type": "works at"}]}, {"ok"}),
        ("neighbors", {"entity": a["Acme"]}, {"not_found"}),
        ("relation_chain", {"entity": "Ada", "relation_type": "works at"}, {"not_found"}),
        ("shortest_path", {"from": "B0", "to": a["Acme"]}, {"not_found"}),
        ("subgraph", {"entities": [a["Acme"]]}, {"not_found"}),
        ("find_entities", {"cursor": cur["find"], "limit": 1}, {"invalid"}),
        ("entity_history", {"name": "B0", "cursor": cur["history"]}, {"invalid"}),
        ("search", {"query": "Filler", "mode": "keyword", "limit": 1, "cursor": cur["search"]}, {"invalid"}),
        ("audit_log", {"cursor": cur["audit"]}, {"invalid"}),
        ("read_graph", {"cursor": own_cursor}, {"invalid"}),
        ("neo-read_graph", {"cursor": cur["find"]}, {"invalid"}),
        ("add_observations", {"observations": [{"entityName": "Ada", "contents": ["planted"]}]}, {"not_found"}),
        ("create_relations", {"relations": [{"from": "B0", "to": "Ada", "relationType": "steals"}]}, {"not_found"}),
        (
            "neo-create_relations",
            {"relations": [{"source": "B0", "target": "Ada", "relationType": "S"}]},
            {"not_found"},
        ),
        ("neo-add_observations", {"observations": [{"entityName": "Ada", "observations": ["planted"]}]}, {"ok"}),
        ("delete_entities", {"entityNames": ["Ada", "Acme"]}, {"ok"}),
        ("neo-delete_entities", {"entityNames": ["Ada"]}, {"ok"}),
        ("delete_observations", {"deletions": [{"entityName": "Ada", "observations": ["o1"]}]}, {"ok"}),
        (
            "neo-delete_relations",
            {"relations": [{"source": "Ada", "target": "Acme", "relationType": "works at"}]},
            {"ok"},
        ),
    ]
    async with clients(hostile_server, other, SCOPES) as b:
        for tool, args, expect in cases:
            await check(b, admin, schemas, tool, args, expect)
        for tool, args in [
            ("open_nodes", {"names": ["Ada", "Filler 0"]}),
            ("neo-find_memories_by_name", {"names": ["Ada"]}),
            ("search_nodes", {"query": "o3"}),
            ("neo-search_memories", {"query": "Filler"}),
            ("search", {"query": "Filler", "mode": "keyword"}),
            ("find_entities", {"text_contains": "o1"}),
            ("find_entities", {"name_contains": "Enchantress"}),
            ("find_entities", {"name_contains": "%"}),
            ("find_entities", {"name_contains": "_", "sort": "name"}),
            ("find_duplicates", {}),
            ("read_graph", {}),
            ("recall", {"query": "Ada said filler", "mode": "keyword"}),
            ("list_episodes", {}),
        ]:
            seen = json.dumps(ok(await b.call_tool(tool, args)))
            assert "Ada" not in seen and "Filler" not in seen and "o3" not in seen, tool
            assert "Enchantress" not in seen, tool
