"""Store-level latency and throughput: the service calls a tool makes, transaction included, while
`bench.writer` keeps ~20 writes/s going; beside each, the floor: the same store queries sent on one
connection held for the whole run (no pool round, no transaction, no result models), taken in turns
with the service call on the same input."""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import asyncpg
import orjson

from app.auth.principal import Principal
from app.config import Settings
from app.services import Services, graph, models, refs
from app.services.filters import EntityFilters
from app.store import entities, history, relations, traversal
from app.store.database import Database, Tenant, Tx
from app.store.history import Event
from bench import env
from bench.generate import WORDS, Generated
from bench.stats import Latency, paired, timed


@dataclass(frozen=True)
class Rounds:
    """How many timed calls each measurement makes (after a few untimed ones)."""

    get_entity: int = 1000
    neighbors: int = 300
    path: int = 200
    write_batches: int = 30
    warmup: int = 20

    @classmethod
    def quick(cls) -> Rounds:
        return cls(get_entity=100, neighbors=30, path=20, write_batches=3, warmup=5)


@dataclass
class Case:
    """One measured operation: the service figure, the floor beside it, and what the answers held."""

    name: str
    target: tuple[str, float] | None  # ("p50_ms", 2.0): service p50 at most; ("per_s", 2000): at least
    service: Latency | None = None
    floor: Latency | None = None
    floor_what: str = ""
    query_only: Latency | None = None  # the operation's main statement alone, where that differs
    extra: dict[str, Any] | None = None
    throughput: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "target": self.target, "floor_what": self.floor_what}
        if self.target:
            kind, bound = self.target
            measured = self.service.p50 if kind == "p50_ms" else (self.throughput or {}).get("service_per_s", 0)
            out["met"] = measured <= bound if kind == "p50_ms" else measured >= bound
        for k in ("service", "floor", "query_only"):
            if (v := getattr(self, k)) is not None:
                out[k] = v.as_dict()
        if self.extra:
            out["extra"] = self.extra
        if self.throughput:
            out["throughput"] = self.throughput
        return out


async def start_writer(settings: Settings, tenant: str, rate: float, names: list[str]) -> asyncio.subprocess.Process:
    """`bench.writer` in its own process, on the same database as `settings`."""
    path = env.bench_dir() / f"writer-names-{os.getpid()}.json"  # read at the writer's start, removed at its stop
    path.write_bytes(orjson.dumps(names))
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.writer",
        tenant,
        str(rate),
        str(path),
        stdout=asyncio.subprocess.PIPE,
        cwd=env.ROOT,
        env=env.database_env(settings),
    )
    assert proc.stdout is not None
    try:
        async with asyncio.timeout(180):  # loading the embedding model on a busy machine
            ready = await proc.stdout.readline()
    except TimeoutError:
        ready = b""
    if ready.strip() != b"ready":
        await stop_writer(proc)
        raise RuntimeError(f"the background writer did not start (exit status {proc.returncode})")
    await asyncio.sleep(2)  # let it reach its pace
    return proc


async def stop_writer(proc: asyncio.subprocess.Process) -> dict[str, Any]:
    if proc.returncode is None:
        proc.terminate()
    out, _ = await proc.communicate()
    (env.bench_dir() / f"writer-names-{os.getpid()}.json").unlink(missing_ok=True)
    return orjson.loads(out) if out.strip() else {"error": f"writer exited with {proc.returncode}"}


@asynccontextmanager
async def tenant_connection(db: Database, tenant: Tenant) -> AsyncIterator[Tx]:
    """One pool connection in the tenant's context for the whole session: statements autocommit."""
    async with db.control.pool.acquire() as conn:
        await conn.execute(
            "SELECT set_config('role', $1, false), set_config('engram.tenant_id', $2, false)", tenant.schema, tenant.id
        )
        try:
            yield Tx(conn, tenant)
        finally:
            await conn.execute("RESET ROLE; RESET engram.tenant_id")


@dataclass
class Bench:
    """What every measurement uses: the services, the raw connection, the caller, existing names."""

    s: Services
    raw: Tx
    who: Principal
    names: list[str]
    rng: random.Random
    r: Rounds

    def picks(self, n: int) -> list[str]:
        return [self.rng.choice(self.names) for _ in range(n)]


async def run(settings: Settings, g: Generated, rounds: Rounds, write_rate: float, say: Any = print) -> dict[str, Any]:
    async with env.services(settings) as (db, s):
        tenant = await db.tenant(g.tenant)
        writer = await start_writer(settings, g.tenant, write_rate, g.sample_names[:1000])
        started = time.monotonic()
        cases: list[Case] = []
        try:
            async with tenant_connection(db, tenant) as raw:
                b = Bench(s, raw, env.principal(g.tenant), g.sample_names, random.Random(11), rounds)
                for measure in (_get_entity, _neighbors, _path, _upserts, _connects):
                    say(f"  {measure.__name__.strip('_')} ...")
                    cases += await measure(b)
        finally:
            load = await stop_writer(writer)
        load["seconds"] = round(time.monotonic() - started, 1)
    say(f"  background writer: {load}")
    return {"cases": [c.as_dict() for c in cases], "writer": load}


async def _get_entity(b: Bench) -> list[Case]:
    s, raw, r = b.s, b.raw, b.r
    picks = b.picks(r.get_entity + r.warmup)
    sizes = []

    async def service(i: int) -> None:
        e = await s.entities.get(b.who, picks[i])
        sizes.append(len(e.relations or ()))

    async def floor(i: int) -> None:
        found = await relations.detail(raw, picks[i], observations=100, relations=s.limits.max_results + 1)
        refs.choose([picks[i]], [d.entity for d in found])

    async def lookup(i: int) -> None:
        await refs.resolve(raw, [picks[i]])

    async def ping(i: int) -> None:
        await raw.conn.fetchval("SELECT 1")

    case = Case("get_entity by name (with relations and observations)", ("p50_ms", 2))
    got = await paired({"service": service, "floor": floor, "lookup": lookup, "ping": ping}, r.get_entity, r.warmup)
    case.service, case.floor, case.query_only, ping_latency = got["service"], got["floor"], got["lookup"], got["ping"]
    case.floor_what = "relations.detail (the one statement get_entity sends) and the reference rule, one connection"
    case.extra = {
        "relations_per_answer_mean": round(sum(sizes) / len(sizes), 1),
        "select_1_roundtrip": ping_latency.as_dict(),
    }
    return [case]


async def _neighbors(b: Bench) -> list[Case]:
    cases = ((2, 50, 5.0), (3, 50, 20.0), (2, 200, None), (3, 200, None))
    return [await _walk(b, depth, limit, target) for depth, limit, target in cases]


async def _walk(b: Bench, depth: int, limit: int, target: float | None) -> Case:
    s, raw, r = b.s, b.raw, b.r
    picks = b.picks(r.neighbors + r.warmup)
    found: list[int] = []
    cut = 0

    async def service(i: int) -> None:
        nonlocal cut
        res = await s.graph.neighbors(b.who, picks[i], depth=depth, direction="both", types=None, limit=limit)
        found.append(len(res.neighbors))
        cut += res.truncated

    async def floor(i: int) -> None:
        start = (await refs.resolve(raw, [picks[i]]))[picks[i]]
        reached, _ = await graph.walk(raw, [start.gid], depth, "both", None, limit + 1, graph.Bounds())
        await traversal.reached(raw, [(start.gid, None), *((x.gid, x.via) for x in reached[:limit])], None)

    case = Case(f"neighbors depth {depth}, both directions, limit {limit}", ("p50_ms", target) if target else None)
    got = await paired({"service": service, "floor": floor}, r.neighbors, r.warmup)
    case.service, case.floor = got["service"], got["floor"]
    case.floor_what = "resolve + one expand per level + traversal.reached, one connection"
    case.extra = {"neighbors_mean": round(sum(found) / len(found), 1), "truncated_share": round(cut / len(found), 2)}
    return case


async def _path(b: Bench) -> list[Case]:
    s, raw, r = b.s, b.raw, b.r
    pairs = [tuple(b.rng.sample(b.names, 2)) for _ in range(r.path + r.warmup)]
    lengths: list[int] = []
    cut = 0

    async def service(i: int) -> None:
        nonlocal cut
        res = await s.graph.path(b.who, pairs[i][0], pairs[i][1], max_depth=6, direction="both", types=None)
        lengths.append(res.length if res.found else -1)
        cut += res.truncated

    async def floor(i: int) -> None:
        ends = await refs.resolve(raw, list(pairs[i]))
        start, end = ends[pairs[i][0]].gid, ends[pairs[i][1]].gid
        steps, _ = await graph.shortest(raw, start, end, 6, "both", None, graph.Bounds(), joins=True)
        if steps:
            order = [start]
            for st in steps:
                order.append(st.other if st.node == order[-1] else st.node)
            await traversal.reached(raw, [(start, None), *zip(order[1:], steps, strict=True)], None)

    case = Case("shortest_path between random entities, max depth 6, both directions", ("p50_ms", 20))
    got = await paired({"service": service, "floor": floor}, r.path, r.warmup)
    case.service, case.floor = got["service"], got["floor"]
    case.floor_what = (
        "resolve + bidirectional BFS (one statement per level, joining edge first) + traversal.reached, one connection"
    )
    found = [n for n in lengths if n >= 0]
    case.extra = {
        "found_share": round(len(found) / len(lengths), 2),
        "length_mean": round(sum(found) / len(found), 2) if found else None,
        "truncated_share": round(cut / len(lengths), 2),
    }
    return [case]


def _rate(lat: Latency, per_call: int) -> float:
    return round(per_call * 1000 / lat.mean, 0)


async def _upserts(b: Bench) -> list[Case]:
    s, raw, r = b.s, b.raw, b.r
    run = uuid.uuid4().hex[:6]

    def batch(i: int, tag: str) -> list[models.EntityIn]:
        return [
            models.EntityIn(
                name=f"Bench {tag} {run} {i} {k}",
                type="note",
                description="made by the benchmark",
                observations=[f"first fact {k}", f"second fact {k}"],
            )
            for k in range(100)
        ]

    async def service(i: int) -> None:
        with env.tool_call(b.who, "upsert_entities"):
            await s.entities.upsert(b.who, batch(i, "upsert"), "merge")

    async def merge(i: int) -> None:  # the same names again, each gaining one observation
        items = [e.model_copy(update={"observations": ["third fact"]}) for e in batch(i, "upsert")]
        with env.tool_call(b.who, "upsert_entities"):
            await s.entities.upsert(b.who, items, "merge")

    async def floor(i: int) -> None:
        new = [
            entities.NewEntity(id=str(uuid.uuid4()), name=e.name, type=e.type, description=e.description or "")
            for e in batch(i, "floor")
        ]
        async with raw.conn.transaction():
            await entities.insert(raw, new, "bench")
            added = await entities.add_observations(
                raw, [entities.NewFact(n.id, o) for n in new for o in ("first fact", "second fact")], "bench"
            )
            events = [Event(n.id, "created", {"name": n.name, "type": n.type}) for n in new]
            events += [Event(eid, "observations_added", {"observations": t}) for eid, t in added.items()]
            await history.record(raw, events, "bench")

    case = Case("upsert_entities, batches of 100 new entities (2 observations each)", ("per_s", 2000))
    got = await paired({"service": service, "floor": floor}, r.write_batches, 2)
    case.service, case.floor = got["service"], got["floor"]
    case.floor_what = (
        "entities.insert + add_observations + history.record of the same rows in one transaction"
        " (the service also embeds their texts and writes their search documents)"
    )
    case.throughput = {"service_per_s": _rate(case.service, 100), "floor_per_s": _rate(case.floor, 100)}
    merged = await timed(merge, r.write_batches, 0)
    case.extra = {"merge_existing": merged.as_dict(), "merge_existing_per_s": _rate(merged, 100)}
    return [case]


async def _connects(b: Bench) -> list[Case]:
    s, raw, r, rng = b.s, b.raw, b.r, b.rng
    kinds = ["benchmarks", "cites", "follows"]

    def pairs(n: int) -> list[tuple[str, str, str]]:
        return [(*rng.sample(b.names, 2), rng.choice(kinds)) for _ in range(n)]

    async def service(i: int) -> None:
        items = [models.RelationIn(**{"from": x, "to": y}, type=t) for x, y, t in pairs(100)]
        with env.tool_call(b.who, "connect_entities"):
            await s.relations.connect(b.who, items)

    async def single(i: int) -> None:
        x, y, t = pairs(1)[0]
        with env.tool_call(b.who, "connect_entities"):
            await s.relations.connect(b.who, [models.RelationIn(**{"from": x, "to": y}, type=t)])

    rows = await entities.live_by_names(raw, b.names[:400])
    records = list(rows.values())

    async def floor(i: int) -> None:
        new = [relations.NewRelation(x, y, rng.choice(kinds)) for x, y in (rng.sample(records, 2) for _ in range(100))]
        async with raw.conn.transaction():
            await relations.insert(raw, new, "bench")

    case = Case("connect_entities, batches of 100 new relations between existing entities", None)
    got = await paired({"service": service, "floor": floor}, r.write_batches, 2)
    case.service, case.floor = got["service"], got["floor"]
    case.floor_what = "relations.insert of 100 edges into the REL label table, ends already resolved"
    case.throughput = {"service_per_s": _rate(case.service, 100), "floor_per_s": _rate(case.floor, 100)}
    one = await timed(single, r.write_batches * 5, 2)
    case.extra = {"single_relation_call": one.as_dict()}
    return [case]


# --- a new tenant's first reads -------------------------------------------------------------


async def fresh_tenant(settings: Settings, size: int = 10_000, queries: int = 20, say: Any = print) -> dict[str, Any]:
    """`search_nodes` and `find_entities` right after an import into an empty tenant: `size` entities
    (two observations each) and as many relations, written through the services in batches of 100
    as an import tool call would, then the reads at once, before autovacuum has had its minute.
    Autovacuum is held off for the tenant's tables, so the reads see only the statistics the
    writes themselves gave; the answer says which tables had them (`reltuples` -1: none)."""
    rng = random.Random(3)
    key = f"bench-fresh-{uuid.uuid4().hex[:8]}"
    async with env.services(settings) as (db, s):
        who = env.principal(key)
        tenant = await db.tenant(key)
        await _hold_off_autovacuum(settings, tenant.schema)
        names = [f"{rng.choice(WORDS).capitalize()} {rng.choice(WORDS)} {i}" for i in range(size)]
        started = time.monotonic()
        for lo in range(0, size, 100):
            items = [
                models.EntityIn(
                    name=n,
                    type=rng.choice(["person", "project", "note"]),
                    observations=[f"{rng.choice(WORDS)} {rng.choice(WORDS)} {k}" for k in range(2)],
                )
                for n in names[lo : lo + 100]
            ]
            with env.tool_call(who, "create_entities"):
                await s.entities.upsert(who, items, "skip")
        for lo in range(0, size, 100):
            rels = [
                models.RelationIn(**{"from": names[i], "to": rng.choice(names)}, type="mentions")
                for i in range(lo, min(lo + 100, size))
            ]
            with env.tool_call(who, "create_relations"):
                await s.relations.connect(who, [r for r in rels if r.from_ != r.to], exact=True)
        written = time.monotonic() - started
        async with db.transaction(tenant, readonly=True) as tx:
            analyzed = await tx.fetch(
                "SELECT relname::text, reltuples::bigint FROM pg_class"
                " WHERE relnamespace = $1::text::regnamespace AND relkind = 'r' ORDER BY relname",
                tenant.schema,
            )
        words = [rng.choice(WORDS) for _ in range(queries)]

        async def search(i: int) -> None:
            await s.graph.matching(who, words[i] if i >= 0 else "amber")

        async def find(i: int) -> None:
            filters = EntityFilters(text_contains=words[i] if i >= 0 else "amber")
            await s.entities.find(who, filters, "recent", 20, None)

        got = {"search_nodes": await timed(search, queries, 1), "find_entities": await timed(find, queries, 1)}
    say(f"  {size:,} entities written in {written:.1f} s; reads: {got}")
    return {
        "entities": size,
        "written_s": round(written, 1),
        "reltuples_at_read": {r[0]: r[1] for r in analyzed},
        **{k: v.as_dict() for k, v in got.items()},
    }


async def _hold_off_autovacuum(settings: Settings, schema: str) -> None:
    """No autovacuum on the tenant's tables, as its owner: the reads then see what a tenant sees
    in the minute (or more, on a busy server) before autovacuum gets to its new tables."""
    conn = await asyncpg.connect(settings.admin_dsn())
    try:
        tables = await conn.fetch(
            "SELECT quote_ident(relname) FROM pg_class WHERE relnamespace = $1::text::regnamespace AND relkind = 'r'",
            schema,
        )
        for (table,) in tables:
            await conn.execute(f"ALTER TABLE {schema}.{table} SET (autovacuum_enabled = false)")
    finally:
        await conn.close()


def cli() -> None:
    """`python -m bench.store fresh [SIZE]`: the new tenant's first reads (`fresh_tenant`), on the
    configured database, in a tenant of its own."""
    parser = argparse.ArgumentParser(prog="python -m bench.store", description=cli.__doc__)
    parser.add_argument("what", choices=["fresh"])
    parser.add_argument("size", type=int, nargs="?", default=10_000)
    args = parser.parse_args()
    out = asyncio.run(fresh_tenant(env.settings(), args.size))
    print(orjson.dumps(out, option=orjson.OPT_INDENT_2).decode())


if __name__ == "__main__":
    cli()
