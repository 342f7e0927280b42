"""`python -m bench.scaling`: the figures of docs/scaling.md, in a scratch database of their own.

- tenants: what one tenant costs a database (creation time, bytes and catalog rows per empty
  tenant) and a backend that touched many tenants (its relation cache, per tenant touched);
- rates: the cost per call of the shared rate bucket (`engram.take_tokens`) beside a bare round trip;
- pooler: `get_entity` over HTTP, the same server code reaching PostgreSQL directly and through
  PgBouncer in transaction mode, in alternating rounds (skipped where no PgBouncer 1.21+ runs).

`--quick` checks that every section still runs (a few tenants, short rounds), not the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
import uuid
from typing import Any

import asyncpg
import orjson
from pydantic import SecretStr

from app.auth.devkeys import mint_token
from app.config import Settings
from app.devdb import provision
from app.store.database import Database
from bench import env, procs
from bench.over_http import engram_env, mcp_calls
from bench.stats import Latency, paired, saturate
from tests.support.client import connect, ok
from tests.support.server import free_port

# The system catalogs a tenant adds rows to (AGE's own included).
CATALOGS = (
    "pg_class", "pg_attribute", "pg_type", "pg_index", "pg_depend", "pg_constraint", "pg_trigger",
    "pg_namespace", "pg_sequence", "pg_attrdef", "pg_statistic_ext", "pg_init_privs", "ag_catalog.ag_label",
)  # fmt: skip


async def _catalog_rows(conn: asyncpg.Connection) -> dict[str, int]:
    return {c: await conn.fetchval(f"SELECT count(*) FROM {c}") for c in CATALOGS}


# What the system catalogs take on disk (the signal of docs/scaling.md, "When to add a cell").
CATALOG_BYTES = (
    "SELECT sum(pg_total_relation_size(oid))::bigint FROM pg_class WHERE relnamespace = 'pg_catalog'::regnamespace"
)


async def tenants(s: Settings, n: int, touched: int) -> dict[str, Any]:
    """Make `n` tenants one per transaction; then one backend reads 4 tables of `touched` of them."""
    conn = await asyncpg.connect(s.admin_dsn())
    try:
        size0, rows0 = await conn.fetchval("SELECT pg_database_size(current_database())"), await _catalog_rows(conn)
        catalog0 = await conn.fetchval(CATALOG_BYTES)
        made: list[int] = []
        keys = [f"size-{i:05d}" for i in range(n)]
        for key in keys:
            started = time.perf_counter_ns()
            await conn.fetchrow("SELECT * FROM engram.tenant_schema($1, true)", key)
            made.append(time.perf_counter_ns() - started)
        await conn.execute("CHECKPOINT")
        size1, rows1 = await conn.fetchval("SELECT pg_database_size(current_database())"), await _catalog_rows(conn)
        catalog1 = await conn.fetchval(CATALOG_BYTES)
        listed = await conn.fetch("SELECT schema_name FROM engram.tenants ORDER BY key LIMIT $1", touched)
        schemas = [r[0] for r in listed]
    finally:
        await conn.close()
    reader = await asyncpg.connect(s.admin_dsn())
    try:
        memory = "SELECT sum(total_bytes)::bigint FROM pg_backend_memory_contexts"
        cache = "SELECT sum(total_bytes)::bigint FROM pg_backend_memory_contexts WHERE name = 'CacheMemoryContext'"
        before, cache_before = await reader.fetchval(memory), await reader.fetchval(cache)
        for schema in schemas:
            await reader.execute(
                f"SELECT (SELECT count(*) FROM {schema}.entities), (SELECT count(*) FROM {schema}.observations),"
                f' (SELECT count(*) FROM {schema}."Entity"), (SELECT count(*) FROM {schema}."REL")'
            )
        after, cache_after = await reader.fetchval(memory), await reader.fetchval(cache)
    finally:
        await reader.close()
    return {
        "tenants": n,
        "create_ms": Latency.of(made).as_dict(),
        "bytes_per_tenant": (size1 - size0) // n,
        "catalog_bytes_per_tenant": (catalog1 - catalog0) // n,
        "catalog_rows_per_tenant": round((sum(rows1.values()) - sum(rows0.values())) / n, 1),
        "catalog_rows_per_tenant_by_catalog": {c: round((rows1[c] - rows0[c]) / n, 1) for c in CATALOGS},
        "backend": {
            "tenants_touched": len(schemas),
            "bytes_before": before,
            "bytes_after": after,
            "bytes_per_tenant_touched": (after - before) // max(len(schemas), 1),
            "cache_bytes_per_tenant_touched": (cache_after - cache_before) // max(len(schemas), 1),
        },
    }


async def rates(s: Settings, iterations: int) -> dict[str, Any]:
    """One call's admission by the shared bucket (a lease of one token each time: the worst case,
    a tenant at a low rate) beside a bare `SELECT 1` on the same pool."""
    db = Database.from_settings(s)
    await db.open()
    tenant = str(uuid.uuid4())
    try:

        async def bucket(_: int) -> None:
            async with db.connection() as lease:
                await lease.conn.fetchrow("SELECT * FROM engram.take_tokens($1::uuid, 1, 1000000, 1000000)", tenant)

        async def bare(_: int) -> None:
            async with db.connection() as lease:
                await lease.conn.fetchval("SELECT 1")

        out = await paired({"take_tokens": bucket, "select_1": bare}, iterations, iterations // 10)
    finally:
        await db.close()
    return {name: latency.as_dict() for name, latency in out.items()}


async def pooler(s: Settings, seconds: float, rounds: int, clients: int) -> dict[str, Any]:
    """`get_entity` throughput over HTTP: one server straight to PostgreSQL, one through PgBouncer."""
    from app.devdb.pooler import PgBouncer

    state = provision.LocalState.load()
    if state is None:
        return {"skipped": "PgBouncer runs in front of the local `engram db` database only"}
    bouncer = PgBouncer(free_port(), state.port, {provision.APP_ROLE: state.app_password}, pool_size=10)
    try:
        bouncer.start()
    except provision.ProvisionError as exc:
        return {"skipped": str(exc)}
    database = s.runtime_dsn().rsplit("/", 1)[1]
    pooled = SecretStr(bouncer.url(provision.APP_ROLE, database))
    through = s.model_copy(update={"database_url": pooled, "listen_database_url": s.database_url})
    tenant = "scaling-bench"
    names = [f"entity {i}" for i in range(200)]
    ports = {"direct": free_port(), "pgbouncer": free_port()}
    extra = {"ENGRAM_EMBEDDING_PROVIDER": "none"}
    rng = random.Random(27)
    results: dict[str, list[dict[str, Any]]] = {"direct": [], "pgbouncer": []}
    try:
        with (
            procs.serve(procs.python("-m", "app.cli", "serve"), ports["direct"], {
                **engram_env(s, ports["direct"], clients), **extra}),
            procs.serve(procs.python("-m", "app.cli", "serve"), ports["pgbouncer"], {
                **engram_env(through, ports["pgbouncer"], clients), **extra}),
        ):  # fmt: skip
            token = mint_token(s.model_copy(update={"port": ports["direct"]}), tenant=tenant)
            async with connect(f"http://127.0.0.1:{ports['direct']}/mcp", token) as c:
                for i in range(0, len(names), 50):
                    batch = [{"name": n, "type": "thing", "observations": [f"about {n}"]} for n in names[i : i + 50]]
                    ok(await c.call_tool("upsert_entities", {"entities": batch}))
            for r in range(rounds):
                for way in ("direct", "pgbouncer") if r % 2 == 0 else ("pgbouncer", "direct"):
                    port = ports[way]
                    tok = mint_token(s.model_copy(update={"port": port}), tenant=tenant)
                    url = f"http://127.0.0.1:{port}/mcp"
                    async with mcp_calls(
                        url, tok, "2026-07-28", clients, "get_entity", lambda: {"name": rng.choice(names)}
                    ) as calls:
                        await saturate(calls, min(1.0, seconds), 0)
                        results[way].append((await saturate(calls, seconds, 0)).as_dict())
    finally:
        bouncer.stop()
    summary = {
        way: {
            "calls_per_s": round(sum(x["per_second"] for x in runs) / len(runs), 1),
            "errors": sum(x["errors"] for x in runs),
            "p50_ms": round(sum(x["latency"]["p50"] for x in runs) / len(runs), 2),
        }
        for way, runs in results.items()
    }
    ratio = summary["pgbouncer"]["calls_per_s"] / summary["direct"]["calls_per_s"]
    return {"clients": clients, "seconds": seconds, "rounds": rounds, "summary": summary, "ratio": round(ratio, 3)}


async def main(args: argparse.Namespace) -> dict[str, Any]:
    s = await env.fresh_database(env.settings(), env.scratch_name("scaling"))
    results: dict[str, Any] = {"machine": env.machine(), "versions": await env.database_versions(s)}
    results["machine"]["quick"] = args.quick
    try:
        print("tenants ...")
        results["tenants"] = await tenants(s, 10 if args.quick else args.tenants, 10 if args.quick else args.touched)
        print("rates ...")
        results["rates"] = await rates(s, 50 if args.quick else 2000)
        print("pooler ...")
        seconds, rounds = (1.0, 1) if args.quick else (args.seconds, args.rounds)
        results["pooler"] = await pooler(s, seconds, rounds, args.clients)
    finally:
        await provision.drop_database(s.admin_dsn(), env.scratch_name("scaling"))
    return results


def cli() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.scaling", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="check the benchmark runs; no figures")
    parser.add_argument("--tenants", type=int, default=200)
    parser.add_argument("--touched", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--results", help="write the figures as JSON here")
    args = parser.parse_args()
    results = asyncio.run(main(args))
    text = orjson.dumps(results, option=orjson.OPT_INDENT_2).decode()
    print(text)
    if args.results:
        with open(args.results, "w") as f:
            f.write(text)


if __name__ == "__main__":
    cli()
