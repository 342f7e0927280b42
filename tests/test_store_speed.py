"""The store's fast paths give the answers the slower ones gave: `get_entity` in one statement,
shortest paths that look for an edge joining the two frontiers and put off a hub's level, and
planner statistics refreshed by bulk writes. Through the real server, plus the search logic over a
graph held in memory (as in test_graph_logic.py)."""

from __future__ import annotations

import asyncio
import random
from collections import deque
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import pytest

from app.services import graph
from app.store import entities, listings, relations, traversal
from app.store.connect import init_connection
from app.store.database import Database, Tenant, Tx
from app.store.traversal import Step
from tests.support.client import ok

# --- get_entity ------------------------------------------------------------------------------


async def _upsert(c: Any, items: list[dict[str, Any]]) -> None:
    for lo in range(0, len(items), 100):
        ok(await c.call_tool("upsert_entities", {"entities": items[lo : lo + 100]}))


async def _connect(c: Any, rels: list[dict[str, Any]]) -> None:
    for lo in range(0, len(rels), 100):
        ok(await c.call_tool("connect_entities", {"relations": rels[lo : lo + 100]}))


async def _as_before(db_settings: Any, tenant: str, ref: str, max_observations: int, cap: int) -> dict[str, Any]:
    """get_entity's answer as the three statements it used to send produce it: the reference rule,
    the observations, and the relations by two directed Cypher matches (`relations.touching`)."""
    from app.services.refs import resolve

    db = Database.from_settings(db_settings)
    await db.open()
    try:
        async with db.transaction(await db.tenant(tenant), readonly=True) as tx:
            row = (await resolve(tx, [ref]))[ref]
            obs = (await entities.observations(tx, [row.id], max_observations))[row.id]
            rels = await relations.touching(tx, row.id, cap + 1)
    finally:
        await db.close()
    return {
        "id": row.id,
        "observations": obs.texts,
        "observations_total": obs.total,
        "relations": [(r.id, r.source, r.type, r.target, r.props.get("strength"), r.props.get("notes")) for r in rels],
    }


def _relations(got: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(r["id"], r["from"], r["type"], r["to"], r["strength"], r["notes"]) for r in got["relations"]]


ROOM = {"max_tokens": 20_000}


async def test_get_entity_answers_as_before_with_many_observations_and_relations(db_settings, client_for, tenant):
    """The whole record as the store reads it (the answer given room for all of it: `max_tokens`)."""
    facts = [f"fact {i:03d}" for i in range(150)]
    async with client_for(tenant) as c:
        await _upsert(
            c,
            [{"name": "Center", "type": "hub", "observations": facts[:100]}, {"name": "CENTER", "type": "echo"}]
            + [{"name": f"Out {i:03d}", "type": "leaf"} for i in range(120)]
            + [{"name": f"In {i:03d}", "type": "leaf"} for i in range(130)]
            + [{"name": "Gone", "type": "leaf"}],
        )
        await _upsert(c, [{"name": "Center", "type": "hub", "observations": facts[100:]}])
        await _connect(
            c,
            [
                {"from": "Center", "to": f"Out {i:03d}", "type": "points at", "strength": round(i / 200, 2)}
                for i in range(120)
            ]
            + [{"from": f"In {i:03d}", "to": "Center", "type": "points at", "notes": f"n{i}"} for i in range(130)]
            + [{"from": "Center", "to": "Gone", "type": "points at"}, {"from": "Gone", "to": "Center", "type": "x"}],
        )
        ok(await c.call_tool("remove_entities", {"entities": ["Gone"]}))

        got = ok(await c.call_tool("get_entity", {"name": "Center", **ROOM}))
        before = await _as_before(db_settings, tenant, "Center", 100, 200)
        assert got["id"] == before["id"] and got["type"] == "hub"  # the exact name wins over "CENTER"
        assert got["observations"] == facts[:100] == before["observations"]
        assert got["observations_total"] == 150 == before["observations_total"]
        assert _relations(got) == before["relations"][:200]
        assert got["relations_truncated"] is True and len(before["relations"]) == 201
        # Outgoing first, by target; then incoming, by source; the deleted end nowhere.
        assert [r["to"] for r in got["relations"][:120]] == [f"Out {i:03d}" for i in range(120)]
        assert [r["from"] for r in got["relations"][120:]] == [f"In {i:03d}" for i in range(80)]
        assert got["relations"][6]["strength"] == 0.03 and got["relations"][121]["notes"] == "n1"

        by_id = ok(await c.call_tool("get_entity", {"id": got["id"], "max_observations": 0, **ROOM}))
        assert by_id["observations"] == [] and by_id["observations_total"] == 150
        assert _relations(by_id) == _relations(got)
        bare = ok(await c.call_tool("get_entity", {"name": "Center", "include_relations": False, **ROOM}))
        assert bare["relations"] is None and bare["relations_truncated"] is False
        small = ok(await c.call_tool("get_entity", {"name": "Out 007"}))
        before = await _as_before(db_settings, tenant, "Out 007", 100, 200)
        assert _relations(small) == before["relations"] and small["relations_truncated"] is False
        assert small["observations"] == [] and small["observations_total"] == 0


# --- shortest paths through the server ---------------------------------------------------------


async def test_shortest_path_through_a_hub_and_around_deleted_entities(client_for, tenant):
    leaves = [f"Leaf {i:04d}" for i in range(3000)]
    async with client_for(tenant) as c:
        await _upsert(c, [{"name": "Hub", "type": "hub"}] + [{"name": n, "type": "leaf"} for n in leaves])
        await _upsert(c, [{"name": n, "type": "node"} for n in ("Far", "A", "B", "C", "D", "X")])
        await _connect(c, [{"from": "Hub", "to": n, "type": "has"} for n in leaves])
        chain = [("Leaf 2999", "Far"), ("A", "B"), ("B", "C"), ("C", "D"), ("A", "X"), ("X", "D")]
        await _connect(c, [{"from": a, "to": b, "type": "next"} for a, b in chain])

        def names(path: dict[str, Any]) -> list[str]:
            return [n["name"] for n in path["nodes"]]

        two = ok(await c.call_tool("shortest_path", {"from": "Leaf 0001", "to": "Leaf 0002"}))
        assert names(two) == ["Leaf 0001", "Hub", "Leaf 0002"] and two["truncated"] is False
        assert [(r["from"], r["to"]) for r in two["relations"]] == [("Hub", "Leaf 0001"), ("Hub", "Leaf 0002")]
        # The hub's 3,000 edges are more than a level may hold unread for long: the far side, one
        # edge away, is expanded instead, and the path found is whole and not cut.
        three = ok(await c.call_tool("shortest_path", {"from": "Leaf 0001", "to": "Far"}))
        assert names(three) == ["Leaf 0001", "Hub", "Leaf 2999", "Far"] and three["truncated"] is False
        back = ok(await c.call_tool("shortest_path", {"from": "Far", "to": "Leaf 0001"}))
        assert names(back) == ["Far", "Leaf 2999", "Hub", "Leaf 0001"] and back["truncated"] is False
        assert [r["type"] for r in back["relations"]] == ["next", "has", "has"]
        out = ok(await c.call_tool("shortest_path", {"from": "Leaf 0001", "to": "Far", "direction": "out"}))
        assert out["found"] is False

        assert names(ok(await c.call_tool("shortest_path", {"from": "A", "to": "D"}))) == ["A", "X", "D"]
        ok(await c.call_tool("remove_entities", {"entities": ["X"]}))
        around = ok(await c.call_tool("shortest_path", {"from": "A", "to": "D"}))
        assert names(around) == ["A", "B", "C", "D"] and around["length"] == 3
        ok(await c.call_tool("remove_entities", {"entities": ["C"]}))
        assert ok(await c.call_tool("shortest_path", {"from": "A", "to": "D"}))["found"] is False
        ok(await c.call_tool("remove_entities", {"entities": ["Hub"]}))
        assert ok(await c.call_tool("shortest_path", {"from": "Leaf 0001", "to": "Leaf 0002"}))["found"] is False
        typed = ok(await c.call_tool("shortest_path", {"from": "Leaf 2999", "to": "Far", "relation_types": ["next"]}))
        assert names(typed) == ["Leaf 2999", "Far"] and typed["relations"][0]["type"] == "next"
        assert (
            ok(await c.call_tool("shortest_path", {"from": "Leaf 2999", "to": "Far", "relation_types": ["has"]}))[
                "found"
            ]
            is False
        )

        near = ok(await c.call_tool("neighbors", {"entity": "Leaf 2999", "depth": 2}))
        assert [(n["entity"]["name"], n["depth"], n["via"]["type"]) for n in near["neighbors"]] == [("Far", 1, "next")]


# --- the search logic over a graph in memory ----------------------------------------------------

Edges = list[tuple[str, str]]


@pytest.fixture
def edges(monkeypatch: pytest.MonkeyPatch) -> tuple[Edges, list[int]]:
    """The graph the searches read, and the number of edges each store call returned."""
    held: Edges = []
    read: list[int] = []

    def level(frontier: Sequence[str], outgoing: bool, incoming: bool) -> list[Step]:
        steps = []
        for source, target in held:
            if outgoing and source in frontier:
                steps.append(Step(source, target, source, target))
            if incoming and target in frontier:
                steps.append(Step(target, source, source, target))
        return steps

    async def expand(
        tx: Any, frontier: Sequence[str], *, outgoing: bool, incoming: bool, types: Any, limit: int, when: Any = None
    ):
        steps = level(frontier, outgoing, incoming)[:limit]
        read.append(len(steps))
        return steps

    async def expand_or_join(
        tx: Any,
        frontier: Sequence[str],
        others: Sequence[str],
        *,
        outgoing: bool,
        incoming: bool,
        types: Any,
        limit: int,
        when: Any = None,
    ):
        joining = [s for s in level(frontier, outgoing, incoming) if s.other in others]
        if joining:
            read.append(1)
            return joining[0], []
        steps = level(frontier, outgoing, incoming)[:limit]
        read.append(len(steps))
        return None, steps

    monkeypatch.setattr(traversal, "expand", expand)
    monkeypatch.setattr(traversal, "expand_or_join", expand_or_join)
    return held, read


def _bfs(held: Edges, start: str, end: str, direction: str) -> int | None:
    """The true distance, by plain breadth-first search."""
    seen, queue = {start: 0}, deque([start])
    while queue:
        n = queue.popleft()
        if n == end:
            return seen[n]
        for a, b in held:
            for x, y, ok_ in ((a, b, direction in ("out", "both")), (b, a, direction in ("in", "both"))):
                if ok_ and x == n and y not in seen:
                    seen[y] = seen[n] + 1
                    queue.append(y)
    return None


def _nodes(path: list[Step], start: str) -> list[str]:
    order = [start]
    for step in path:
        order.append(step.other if step.node == order[-1] else step.node)
    return order


def _check_path(held: Edges, start: str, end: str, path: list[Step], direction: str) -> None:
    node = start
    for step in path:
        assert (step.source, step.target) in held
        assert node in (step.node, step.other)
        nxt = step.other if step.node == node else step.node
        if direction == "out":
            assert (step.source, step.target) == (node, nxt)
        if direction == "in":
            assert (step.source, step.target) == (nxt, node)
        node = nxt
    assert node == end


async def test_joined_search_finds_paths_as_long_as_breadth_first_search(edges) -> None:
    held, _ = edges
    rng = random.Random(4)
    for trial in range(30):
        held.clear()
        nodes = [f"n{i}" for i in range(40)]
        hubs = nodes[:2]
        while len(held) < 70:
            a, b = rng.choice(nodes), rng.choice(hubs if rng.random() < 0.4 else nodes)
            if a != b and (a, b) not in held:
                held.append((a, b))
        for _ in range(10):
            start, end = rng.sample(nodes, 2)
            for direction in ("both", "out", "in"):
                truth = _bfs(held, start, end, direction)
                truth = truth if truth is not None and truth <= 6 else None
                for bounds in (graph.Bounds(), graph.Bounds(probe_edges=2)):
                    for joins in (False, True):
                        path, cut = await graph.shortest(None, start, end, 6, direction, None, bounds, joins=joins)  # type: ignore[arg-type]
                        assert not cut, (trial, start, end, direction, joins)
                        assert (None if path is None else len(path)) == truth, (trial, start, end, direction, joins)
                        if path is not None:
                            _check_path(held, start, end, path, direction)


async def test_a_hub_level_is_put_off_while_the_other_side_is_smaller(edges) -> None:
    held, read = edges
    held += [("hub", f"leaf{i}") for i in range(500)] + [("leaf499", "far")]
    path, cut = await graph.shortest(None, "leaf1", "far", 6, "both", None, graph.Bounds(probe_edges=50), joins=True)  # type: ignore[arg-type]
    assert _nodes(path, "leaf1") == ["leaf1", "hub", "leaf499", "far"] and not cut
    assert max(read) <= 51  # the hub's level was never read whole
    read.clear()
    plain, _ = await graph.shortest(None, "leaf1", "far", 6, "both", None, graph.Bounds(probe_edges=50))  # type: ignore[arg-type]
    assert len(plain) == 3 and max(read) == 500


async def test_when_both_sides_are_hubs_the_bound_still_says_truncated(edges) -> None:
    held, _ = edges
    held += [("a", f"x{i}") for i in range(40)] + [("b", f"y{i}") for i in range(40)]
    held += [("x39", "m"), ("m", "y39")]
    bounds = graph.Bounds(level_edges=20, frontier=100, probe_edges=5)
    path, cut = await graph.shortest(None, "a", "b", 6, "both", None, bounds, joins=True)  # type: ignore[arg-type]
    assert cut  # a path may exist beyond what was read
    path, cut = await graph.shortest(None, "a", "b", 6, "both", None, graph.Bounds(probe_edges=5), joins=True)  # type: ignore[arg-type]
    assert len(path) == 4 and not cut


# --- planner statistics after an import -------------------------------------------------------------


async def test_an_import_into_a_new_tenant_leaves_its_tables_analyzed(db_settings, client_for, tenant):
    async with client_for(tenant) as c:
        await _upsert(
            c,
            [
                {"name": f"Imported {i:04d}", "type": "note", "description": "x" * 200, "observations": [f"o{i}"]}
                for i in range(800)
            ],
        )
    conn = await asyncpg.connect(db_settings.admin_dsn())
    try:
        schema = await conn.fetchval("SELECT schema_name FROM engram.tenants WHERE key = $1", tenant)
        for _ in range(50):  # the counters reach the statistics views within moments
            row = await conn.fetchrow(
                "SELECT s.analyze_count, c.reltuples FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid"
                " WHERE s.schemaname = $1 AND s.relname = 'entities'",
                schema,
            )
            if row["analyze_count"]:
                break
            await asyncio.sleep(0.1)
        # ANALYZE run by the writes themselves (autovacuum's would count as autoanalyze_count).
        assert row["analyze_count"] >= 1 and row["reltuples"] >= 200
    finally:
        await conn.close()


# --- substring search --------------------------------------------------------------------------


@asynccontextmanager
async def as_owner(db_settings: Any, tenant: str) -> AsyncIterator[tuple[asyncpg.Connection, asyncpg.Record]]:
    """A connection as the schema's owner (it may read the statistics and steer the planner), and the
    tenant's row (id, key, schema) for the store functions' `Tenant`."""
    conn = await asyncpg.connect(db_settings.admin_dsn())
    try:
        await init_connection(conn)
        yield conn, await conn.fetchrow("SELECT id::text, key, schema_name FROM engram.tenants WHERE key = $1", tenant)
    finally:
        await conn.close()


async def test_substring_search_can_read_every_trigram_index(db_settings, client_for, tenant):
    """The substring search behind search_nodes gathers its matches from the trigram indexes of
    names, types and observations, one branch each, rather than testing every entity (an OR with
    an EXISTS can use none of them). A table this small is cheaper to scan, so the planner is told
    not to, which shows what it does once the tables are large."""
    async with client_for(tenant) as c:
        items = [{"name": f"Entity {i:04d}", "type": f"kind{i % 7}", "observations": [f"fact {i}"]} for i in range(300)]
        await _upsert(c, items)
    async with as_owner(db_settings, tenant) as (conn, row):
        trigram = await conn.fetch(
            "SELECT x.indexrelid::regclass::text AS name, x.indexrelid FROM pg_index x"
            " WHERE x.indrelid IN ($1::regclass, $2::regclass) AND pg_get_indexdef(x.indexrelid) LIKE '%gin_trgm_ops%'",
            f'"{row["schema_name"]}".entities',
            f'"{row["schema_name"]}".observations',
        )
        assert len(trigram) == 3  # name, type, observation content
        async with conn.transaction():
            await conn.execute("SET LOCAL enable_seqscan = off")
            found = await entities.matching_text(Tx(conn, Tenant(*row)), "Entity 0123", 10)
            assert [e.name for e in found] == ["Entity 0123"]
            count = "SELECT pg_stat_get_xact_numscans($1)"
            scans = {r["name"]: await conn.fetchval(count, r["indexrelid"]) for r in trigram}
        assert all(scans.values()), scans


async def test_a_name_filter_reads_the_trigram_index_of_aliases(db_settings, client_for, tenant):
    """find_entities' `name_contains` lists names and aliases in two branches: the names' as the filter
    on names alone always was, the aliases' with ids from their trigram index (docs/benchmarks.md
    has both plans on a large tenant). Tables this small are cheaper to scan, or to probe once per
    entity, so the planner is told to do neither."""
    async with client_for(tenant) as c:
        await _upsert(c, [{"name": f"Entity {i:04d}", "type": "thing"} for i in range(300)])
        for i in range(0, 300, 30):
            ok(await c.call_tool("add_aliases", {"name": f"Entity {i:04d}", "aliases": [f"Moniker {i:04d}"]}))
    async with as_owner(db_settings, tenant) as (conn, row):
        index = await conn.fetchval(
            "SELECT x.indexrelid FROM pg_index x WHERE x.indrelid = $1::regclass"
            " AND pg_get_indexdef(x.indexrelid) LIKE '%gin_trgm_ops%'",
            f'"{row["schema_name"]}".aliases',
        )
        async with conn.transaction():
            await conn.execute("SET LOCAL enable_seqscan = off; SET LOCAL enable_nestloop = off")
            for text, expected in (
                ("moniker 0150", ("Entity 0150", "Moniker 0150")),
                ("y 0151", ("Entity 0151", None)),
            ):
                found, total = await listings.find(
                    Tx(conn, Tenant(*row)), sort="name", limit=10, after=None, name_contains=text
                )
                assert [(f.row.name, f.matched_alias) for f in found] == [expected] and total == 1
            assert await conn.fetchval("SELECT pg_stat_get_xact_numscans($1)", index)
