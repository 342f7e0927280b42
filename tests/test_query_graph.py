"""query_graph against the real server and database: useful patterns answer what the tools say,
everything that is not a read of the caller's own graph is refused or harmless, and the time bound
ends a query with `limit` leaving nothing behind."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest
from mcp.shared.exceptions import MCPError

from app.services.graph_query import FUNCTION_NAMES
from app.store.cypher import CypherError, parse
from tests.support.client import connect, error_code, ok, text
from tests.support.server import serve

TEAM = {
    "entities": [
        {"name": "Ada", "type": "person"},
        {"name": "Babbage", "type": "person"},
        {"name": "Lovelace Fund", "type": "org"},
        {"name": "Engine", "type": "project"},
        {"name": "Mill", "type": "project"},
        {"name": "Menabrea", "type": "person"},
        {"name": "O'Brien $$", "type": "person"},
    ]
}
LINKS = [
    ("Ada", "advises", "Menabrea"),
    ("Menabrea", "worked with", "Babbage"),
    ("Babbage", "funds", "Engine"),
    ("Engine", "funds", "Mill"),
    ("Lovelace Fund", "funds", "Engine"),
    ("O'Brien $$", "worked with", "Ada"),
]


async def _team(c: Any) -> None:
    ok(await c.call_tool("upsert_entities", TEAM))
    relations = [{"from": a, "type": t, "to": b} for a, t, b in LINKS]
    ok(await c.call_tool("connect_entities", {"relations": relations}))


async def _q(c: Any, query: str, **kw: Any) -> dict[str, Any]:
    return ok(await c.call_tool("query_graph", {"query": query, **kw}))


async def test_patterns_answer_what_the_tools_say(client_for, tenant):
    async with client_for(tenant) as c:
        await _team(c)
        # "people who worked with someone Ada advised"
        got = await _q(
            c,
            "MATCH (a:Entity {name: 'Ada'})-[r1:REL]->(m)-[r2:REL]-(p:Entity) "
            "WHERE r1.type = 'advises' AND r2.type = 'worked with' AND p.type = 'person' AND p <> a "
            "RETURN DISTINCT p.name AS name ORDER BY name",
        )
        assert got == {"columns": ["name"], "rows": [["Babbage"]], "truncated": False}
        # "projects two hops from Babbage through funds"
        got = await _q(
            c,
            "MATCH (b:Entity)-[x:REL]->()-[y:REL]->(p) WHERE b.name = 'Babbage' AND x.type = 'funds'"
            " AND y.type = 'funds' RETURN p.name, p.type",
        )
        assert got["rows"] == [["Mill", "project"]] and got["columns"] == ["p.name", "p.type"]
        # The same neighbours as the tools read, and the same ids.
        tool = ok(await c.call_tool("neighbors", {"entity": "Engine", "depth": 1}))
        expected = sorted((n["entity"]["name"], n["entity"]["id"]) for n in tool["neighbors"])
        out = await _q(c, "MATCH (e:Entity {name: 'Engine'})-[:REL]->(n) RETURN n.name, n.id")
        inc = await _q(c, "MATCH (e:Entity {name: 'Engine'})<-[:REL]-(n) RETURN n.name, n.id")
        assert sorted(map(tuple, out["rows"] + inc["rows"])) == expected
        # Aggregates, UNWIND, functions, whole entities and relations as AGE maps.
        got = await _q(c, "MATCH (n:Entity) RETURN n.type AS type, count(*) AS total ORDER BY total DESC, type")
        assert got["rows"] == [["person", 4], ["project", 2], ["org", 1]]
        got = await _q(c, "UNWIND ['ada', 'MILL'] AS w MATCH (n) WHERE toLower(n.name) = toLower(w) RETURN n")
        assert [r[0]["properties"]["name"] for r in got["rows"]] == ["Ada", "Mill"]
        assert got["rows"][0][0]["label"] == "Entity"
        got = await _q(c, "MATCH (:Entity {name: 'Ada'})-[r:REL]->() RETURN r.type, r.strength, properties(r).type")
        assert got["rows"] == [["advises", None, "advises"]]
        # Quotes and $$ are data.
        got = await _q(c, 'MATCH (n) WHERE n.name = "O\'Brien $$" RETURN n.name')
        assert got["rows"] == [["O'Brien $$"]]


# A call of each listed function, so the list in the description is what AGE answers.
CALLS = {
    "id": "id(n)", "properties": "properties(n)", "label": "label(n)", "labels": "labels(n)", "type": "type(r)",
    "startNode": "startNode(r)", "endNode": "endNode(r)", "keys": "keys(n)", "size": "size(n.name)",
    "head": "head([1, 2])", "last": "last([1, 2])", "tail": "tail([1, 2])",
    "coalesce": "coalesce(null, 1)", "exists": "exists(n.name)", "toLower": "toLower('A')",
    "toUpper": "toUpper('a')", "trim": "trim(' a ')", "lTrim": "lTrim(' a')", "rTrim": "rTrim('a ')",
    "substring": "substring('abc', 1, 1)", "left": "left('abc', 2)", "right": "right('abc', 2)",
    "replace": "replace('abc', 'b', 'x')", "split": "split('a,b', ',')", "reverse": "reverse('abc')",
    "toString": "toString(1)", "toInteger": "toInteger('3')", "toFloat": "toFloat('1.5')",
    "toBoolean": "toBoolean('true')", "abs": "abs(-1)", "ceil": "ceil(1.2)", "floor": "floor(1.2)",
    "round": "round(1.5)", "sign": "sign(-3)", "count": "count(n)", "sum": "sum(1)", "avg": "avg(1)",
    "min": "min(1)", "max": "max(1)", "collect": "collect(n.name)",
}  # fmt: skip


async def test_every_listed_function_answers(client_for, tenant):
    assert set(CALLS) == set(FUNCTION_NAMES)
    async with client_for(tenant) as c:
        await _team(c)
        for name, call in CALLS.items():
            got = await _q(c, f"MATCH (n:Entity {{name: 'Ada'}})-[r:REL]->(m) RETURN {call} AS v")
            assert len(got["rows"]) == 1, name


async def test_deleted_entities_are_left_out_and_come_back(client_for, tenant):
    async with client_for(tenant) as c:
        await _team(c)
        query = "MATCH (a)-[r:REL]->(b) WHERE a.name = 'Babbage' OR b.name = 'Babbage' RETURN a.name, b.name"
        assert len((await _q(c, query))["rows"]) == 2
        removed = ok(await c.call_tool("remove_entities", {"entities": ["Babbage"]}))
        assert (await _q(c, query))["rows"] == []
        assert (await _q(c, "MATCH (n) RETURN count(n)"))["rows"] == [[6]]
        ok(await c.call_tool("restore_entities", {"ids": [removed["changed"][0]["id"]]}))
        assert len((await _q(c, query))["rows"]) == 2


async def test_rows_are_bounded(client_for, tenant):
    async with client_for(tenant) as c:
        await _team(c)
        got = await _q(c, "MATCH (n) RETURN n.name ORDER BY n.name", limit=3)
        assert [r[0] for r in got["rows"]] == ["Ada", "Babbage", "Engine"] and got["truncated"] is True
        got = await _q(c, "MATCH (n) RETURN n.name LIMIT 2", limit=3)
        assert len(got["rows"]) == 2 and got["truncated"] is False
        too_many = await c.call_tool("query_graph", {"query": "RETURN 1", "limit": 100_000})
        assert error_code(too_many) == "invalid"


# Each must be refused with `invalid`, saying where.
REFUSED = {
    "CREATE (n:Entity {name: 'x'}) RETURN n": "CREATE is not accepted",
    "MATCH (n) SET n.name = 'x' RETURN n": "SET is not accepted",
    "MATCH (n) DELETE n RETURN 1": "DELETE is not accepted",
    "MATCH (n) DETACH DELETE n RETURN 1": "DETACH is not accepted",
    "MATCH (n) REMOVE n.name RETURN n": "REMOVE is not accepted",
    "MERGE (n:Entity {name: 'x'}) RETURN n": "MERGE is not accepted",
    "CALL db.labels() YIELD label RETURN label": "CALL is not accepted",
    "MATCH (n) RETURN n UNION MATCH (m) RETURN m": "RETURN must be the last clause",
    "LOAD CSV FROM 'file:///etc/passwd' AS l RETURN l": "LOAD is not accepted",
    "FOREACH (x IN [1] | CREATE ()) RETURN 1": "FOREACH is not accepted",
    "MATCH (n) RETURN n; MATCH (m) DETACH DELETE m": "RETURN must be the last clause",
    "RETURN pg_sleep(10)": "function pg_sleep is not accepted",
    "RETURN pg_catalog.pg_sleep(10::pg_float8)": "no schema-qualified functions",
    "RETURN pg_catalog.set_config('role', 'none', true)": "no schema-qualified functions",
    "RETURN set_config('role', 'none', true)": "function set_config is not accepted",
    "RETURN range(1, 1000000000)": "function range is not accepted",
    "RETURN ag_catalog.create_graph('x')": "no schema-qualified functions",
    "MATCH (a)-[*1..3]->(b) RETURN b": "variable-length patterns are not accepted",
    "MATCH (a)-[r:REL*]->(b) RETURN b": "variable-length patterns are not accepted",
    "MATCH (n:Secret) RETURN n": "the only label of entities is Entity",
    "MATCH (a)-[:advises]->(b) RETURN b": "the only label of relations is REL",
    "MATCH (n) RETURN *": "name the columns",
    "MATCH (n) WHERE n.name = $name RETURN n": "parameters are not accepted",
    "MATCH (`n`) RETURN `n`": "quoted identifiers are not accepted",
    "RETURN 'unterminated": "unterminated string",
    "RETURN 1 /* never closed": "unterminated comment",
    "RETURN 'a\\x'": "unknown escape",
    "RETURN 'a\\ud800'": "lone surrogate",
    "RETURN 'a\\u0000'": "NUL",
    "MATCH (n) RETURN n.name AS _h0": "names may not start with '_'",
    "MATCH (n)": "a query ends with RETURN",
    "RETURN 99999999999999999999": "integer out of range",
    "SELECT * FROM t": "expected MATCH",
    "$$) AS (a agtype); SELECT 1; --": "parameters are not accepted",
    "RETURN '$$' $$, NULL) AS (x agtype); DROP TABLE x; --": "parameters are not accepted",
}


@pytest.mark.parametrize("query", list(REFUSED))
def test_the_parser_refuses(query):
    with pytest.raises(CypherError) as refused:
        parse(query)
    assert REFUSED[query] in refused.value.reason
    assert refused.value.line >= 1 and refused.value.column >= 1


def test_the_parser_writes_only_its_own_text():
    """Strings become parameters, comments go, names stay plain words: what AGE is given holds no
    quote, no comment and no `$` other than the parameters'."""
    q = parse(
        "MATCH (a {name: 'x$$y'}) // a comment with 'quotes' and $$\n"
        "WHERE a.name = \"it's\" /* more */ RETURN a.name AS n, 'lit' AS l"
    )
    assert q.parameters == {"p0": "x$$y", "p1": "it's", "p2": "lit"}
    assert "'" not in q.text and '"' not in q.text and "//" not in q.text and "/*" not in q.text
    assert q.text.count("$") == 3 and "$$" not in q.text
    assert q.columns == ["n", "l"]


def test_positions_are_line_and_column():
    with pytest.raises(CypherError) as refused:
        parse("MATCH (n)\nWHERE n.name = 'x'\n  SET n.name = 'y' RETURN n")
    assert (refused.value.line, refused.value.column) == (3, 3)


def test_depth_and_size_are_bounded():
    with pytest.raises(CypherError, match="nests deeper"):
        parse("RETURN " + "(" * 100 + "1" + ")" * 100)
    with pytest.raises(CypherError, match="node patterns"):
        parse("MATCH " + ", ".join(f"(n{i})" for i in range(20)) + " RETURN 1")
    with pytest.raises(CypherError, match="tokens"):
        parse("RETURN " + " + ".join(["1"] * 1500))


async def test_hostile_queries_are_refused_through_the_tool(client_for, tenant):
    async with client_for(tenant) as c:
        await _team(c)
        for query in REFUSED:
            result = await c.call_tool("query_graph", {"query": query})
            assert error_code(result) == "invalid", query
            assert "line" in text(result) and "column" in text(result), query
        for bad in ("", "RETURN 1" + " " * 4000, "RETURN '\x00'"):
            assert error_code(await c.call_tool("query_graph", {"query": bad})) == "invalid"
        # What AGE itself refuses (a type mismatch) is `invalid` too, without SQL in the message.
        result = await c.call_tool("query_graph", {"query": "MATCH (n) RETURN n.name + {a: 1}"})
        assert error_code(result) == "invalid" and "SELECT" not in text(result)
        # Nothing was written by any of it.
        assert (await _q(c, "MATCH (n) RETURN count(n)"))["rows"] == [[len(TEAM["entities"])]]


async def test_another_tenants_graph_cannot_be_reached(db_settings, client_for, tenant):
    other = tenant + "-other"
    async with client_for(other) as c:
        ok(await c.call_tool("upsert_entities", {"entities": [{"name": "Other secret", "type": "t"}]}))
    admin = await asyncpg.connect(db_settings.admin_dsn())
    try:
        other_schema = await admin.fetchval("SELECT schema_name FROM engram.tenants WHERE key = $1", other)
    finally:
        await admin.close()
    async with client_for(tenant) as c:
        await _team(c)
        # Its graph's name is data here, never a graph: no query names a graph at all.
        got = await _q(c, f"MATCH (n) WHERE n.name = '{other_schema}' OR n.name = 'Other secret' RETURN n")
        assert got["rows"] == []
        for query in (
            f"MATCH (n) RETURN ag_catalog.cypher('{other_schema}', 'MATCH (n) RETURN n')",
            f"MATCH (n) RETURN {other_schema}.Entity",
        ):
            result = await c.call_tool("query_graph", {"query": query})
            assert error_code(result) == "invalid", query
            assert "Other secret" not in text(result)
        names = await _q(c, "MATCH (n) RETURN n.name")
        assert "Other secret" not in {r[0] for r in names["rows"]}


async def test_a_query_past_its_time_bound_ends_with_limit(db_settings, tenant):
    with serve(db_settings, ENGRAM_QUERY_GRAPH_TIMEOUT_MS="50") as server:
        async with server.client(tenant) as c:
            ok(await c.call_tool("upsert_entities", {"entities": [{"name": f"n{i}", "type": "t"} for i in range(60)]}))
            slow = "MATCH (a), (b), (c), (d) WHERE a.name + b.name + c.name + d.name = 'never' RETURN count(*)"
            result = await c.call_tool("query_graph", {"query": slow})
            assert error_code(result) == "limit", text(result)
            assert "time bound of 50 ms" in text(result)
            # The database is left clean: no statement of the tenant still runs, and the next call answers.
            assert (await _q(c, "MATCH (n) RETURN count(n)"))["rows"] == [[60]]
            conn = await asyncpg.connect(db_settings.admin_dsn())
            try:
                running = await conn.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE '%engram_cypher%'"
                    " AND pid <> pg_backend_pid() AND datname = current_database()"
                )
            finally:
                await conn.close()
            assert running == 0


async def test_query_graph_needs_read_scope_and_is_native_only(server, tenant):
    async with server.client(tenant, scopes=("memory:write",)) as c:
        with pytest.raises(MCPError):  # 403 insufficient_scope at the HTTP layer (tests/test_auth.py)
            await c.call_tool("query_graph", {"query": "RETURN 1"})
    async with server.client(tenant, scopes=("memory:read",)) as c:
        assert (await _q(c, "RETURN 1 AS one"))["rows"] == [[1]]
        assert "query_graph" in {t.name for t in (await c.list_tools()).tools}
    async with connect(server.base + "/mcp/memory", server.token(tenant, ("memory:read",))) as c:
        assert "query_graph" not in {t.name for t in (await c.list_tools()).tools}
