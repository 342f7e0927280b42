"""query_graph beside its floor, and why variable-length patterns are refused.

`python -m bench.cypher [--quick]` makes a graph in a scratch database and measures, taken in turns:
- query_graph through the service (parse, READ ONLY tenant transaction, statement_timeout, AGE,
  decoding) against the floor: the same SQL text sent straight through asyncpg in the tenant's
  context;
- the parser alone;
- AGE 1.5's variable-length pattern `-[*1..2]->`: on a fresh connection (it loads the whole graph
  into the backend), again on it, and after a write committed elsewhere (loaded again), beside
  the same two hops written out.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import asyncpg
import orjson

from app.store import cypher
from app.store.connect import init_connection
from bench import env, generate
from bench.stats import Latency, paired

TWO_HOPS = "MATCH (a:Entity {name: 'NAME'})-[:REL]->()-[:REL]->(b) RETURN count(b) AS n"
ONE_HOP = "MATCH (a:Entity {name: 'NAME'})-[r:REL]->(b) RETURN b.name, r.type LIMIT 50"


async def main(quick: bool) -> dict[str, Any]:
    shape = generate.Shape(2_000, 10_000) if quick else generate.Shape(20_000, 100_000)
    s = await env.fresh_database(env.settings(), env.scratch_name("cypher"))
    made = await generate.ensure(s, shape, keep=False)
    hub = made.hubs[0]
    rounds = 20 if quick else 200
    out: dict[str, Any] = {"entities": shape.entities, "relations": shape.relations, "machine": env.machine()}
    async with env.services(s) as (db, services):
        who = env.principal(made.tenant)
        tenant = await db.tenant(made.tenant)
        conn = await asyncpg.connect(
            s.runtime_dsn(), server_settings={"search_path": "ag_catalog, public", "jit": "off"}
        )
        await init_connection(conn)
        try:
            for name, text in (("one hop", ONE_HOP), ("two hops", TWO_HOPS)):
                query = text.replace("NAME", hub)
                parsed = cypher.parse(query)
                sql = _sql(tenant.schema, parsed)
                params = orjson.dumps(parsed.parameters).decode()

                async def tool(_: int, query: str = query) -> None:
                    with env.tool_call(who, "query_graph"):
                        await services.queries.query(who, query)

                async def floor(_: int, sql: str = sql, params: str = params) -> None:
                    async with conn.transaction(readonly=True):
                        await conn.execute(
                            "SELECT set_config('engram.tenant_id', $1, true), set_config('role', $2, true)",
                            tenant.id,
                            tenant.schema,
                        )
                        await conn.fetch(sql, params)

                got = await paired({"query_graph": tool, "asyncpg": floor}, rounds, 5)
                out[name] = {k: v.as_dict() for k, v in got.items()}
            started = time.perf_counter_ns()
            for _ in range(1000):
                cypher.parse(TWO_HOPS.replace("NAME", hub))
            out["parse_us"] = (time.perf_counter_ns() - started) / 1000 / 1000
        finally:
            await conn.close()
        out["variable_length"] = await _variable_length(s, tenant.schema, tenant.id, hub, 3 if quick else 5)
    return out


def _sql(schema: str, q: cypher.ReadQuery) -> str:
    cols = ", ".join(f"c{i} ag_catalog.agtype" for i in range(len(q.columns)))
    return f"SELECT * FROM ag_catalog.cypher('{schema}', $q$ {q.text} $q$, $1) AS ({cols})"


async def _variable_length(s: Any, schema: str, tenant_id: str, hub: str, rounds: int) -> dict[str, Any]:
    """AGE's own variable-length pattern, as the owner (query_graph refuses it)."""
    sql = (
        "SELECT * FROM ag_catalog.cypher('{}', $q$ MATCH (a:Entity {{name: $n}}){}(b) RETURN count(b) $q$, $1)"
        " AS (n ag_catalog.agtype)"
    )
    varlen = sql.format(schema, "-[*1..2]->")
    fixed = sql.format(schema, "-[]->()-[]->")
    params = orjson.dumps({"n": hub}).decode()
    settings = {"search_path": "ag_catalog, public", "jit": "off"}
    first, again, after_write, hops = [], [], [], []
    for _ in range(rounds):
        conn = await asyncpg.connect(s.admin_dsn(), server_settings=settings)
        writer = await asyncpg.connect(s.admin_dsn(), server_settings=settings)
        try:
            await conn.fetch("SELECT 1")
            for bucket in (first, again):
                t = time.perf_counter_ns()
                await conn.fetch(varlen, params)
                bucket.append(time.perf_counter_ns() - t)
            await writer.execute(
                f"UPDATE {schema}.entities SET updated_at = now() WHERE id = (SELECT id FROM {schema}.entities LIMIT 1)"
            )
            t = time.perf_counter_ns()
            await conn.fetch(varlen, params)
            after_write.append(time.perf_counter_ns() - t)
            t = time.perf_counter_ns()
            await conn.fetch(fixed, params)
            hops.append(time.perf_counter_ns() - t)
            rss = await conn.fetchval("SELECT sum(used_bytes) FROM pg_backend_memory_contexts")
        finally:
            await conn.close()
            await writer.close()
    return {
        "first on a connection": Latency.of(first).as_dict(),
        "again": Latency.of(again).as_dict(),
        "after a write elsewhere": Latency.of(after_write).as_dict(),
        "two hops written out": Latency.of(hops).as_dict(),
        "backend memory in use after, MB": round(float(rss) / 1e6, 1),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    result = asyncio.run(main(parser.parse_args().quick))
    print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
