"""`python -m bench.move`: a tenant moved from the cell `main` to the local cell `b` while it is
written to, in scratch databases of their own on both clusters.

The tenant is generated on `main` (bench/generate.py: 40k entities with about 100k observations
and 50k relations by default, embeddings off); one writer then adds an entity every
`--interval` seconds through the services, as a tool call runs (within its deadline, tried again
while the tenant is moving), while `engram tenant move` runs. Reported: the move's duration and its
steps, the writes' latency during the move (the longest is the pause the write fence caused),
writes acknowledged and found on the target afterwards (none lost), and whether the digests of
every table matched (the move's own comparison, which refuses to switch otherwise).

`--quick` checks that it runs (a small tenant).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import time
from pathlib import Path
from typing import Any

import asyncpg
import orjson
from pydantic import SecretStr

from app.config import CellUrls, Settings
from app.devdb import localcells, provision
from app.services.calls import retrying, within
from app.services.models import EntityIn
from app.services.moves import Mover, Timing
from app.store import migrate
from bench import env, generate
from bench.stats import Latency

QUICK_GRAPH = (500, 600)
FENCE_TARGET_SECONDS = 5.0


async def _prepare_cell(name: str) -> tuple[str, str]:
    """Cell b's scratch database, made anew and migrated: its run-time and owner URLs."""
    cluster = await asyncio.to_thread(localcells.cluster, "b", port=55441)
    await _drop_subscriptions(cluster.url(admin=True, database=name))
    await provision.recreate_database(cluster.url(admin=True), name)
    admin = cluster.url(admin=True, database=name)
    await migrate.migrate(admin, Settings().migrations_dir)
    return cluster.url(database=name), admin


async def _drop_subscriptions(url: str) -> None:
    """Subscriptions an interrupted run left (they would keep the database in use)."""
    try:
        conn = await asyncpg.connect(url)
    except (OSError, asyncpg.PostgresError):
        return
    try:
        here = "SELECT subname FROM pg_subscription s JOIN pg_database d ON d.oid = s.subdbid"
        for (name,) in await conn.fetch(f"{here} WHERE d.datname = current_database()"):
            await conn.execute(f"ALTER SUBSCRIPTION {name} DISABLE")
            await conn.execute(f"ALTER SUBSCRIPTION {name} SET (slot_name = NONE)")
            await conn.execute(f"DROP SUBSCRIPTION {name}")
    finally:
        await conn.close()


async def _writes(services: Any, key: str, interval: float, stop: asyncio.Event, out: dict[str, Any]) -> None:
    """One entity every `interval` seconds, as a tool call runs: within 30 s, tried again while moving."""
    who = env.principal(key)
    i = 0
    while not stop.is_set():
        name = f"during move {i}"
        item = EntityIn(name=name, type="event", observations=[f"written during the move, number {i}"])
        started = time.perf_counter_ns()
        try:
            with env.tool_call(who, "upsert_entities"):
                body = functools.partial(retrying, services.entities.upsert, who, [item], "merge")
                await within(30.0, body, writes=True)
        except Exception as exc:  # counted and reported: a refused write is a finding
            out["refused"].append(f"{type(exc).__name__}: {exc}"[:200])
        else:
            out["acknowledged"].append(name)
        out["latency_ns"].append(time.perf_counter_ns() - started)
        out["ended_at"].append(time.monotonic())
        i += 1
        await asyncio.sleep(interval)


async def run(entities: int, relations: int, interval: float, quick: bool) -> dict[str, Any]:
    name = env.scratch_name("move")
    b_url, b_admin = await _prepare_cell(name)  # first: its subscription of an interrupted run ends
    s = await env.fresh_database(env.settings(), name)
    control = await asyncpg.connect(s.admin_dsn())
    try:
        await control.execute("INSERT INTO engram.cells (name) VALUES ('b') ON CONFLICT DO NOTHING")
        await control.execute("UPDATE engram.cells SET state = CASE WHEN name = 'main' THEN 'open' ELSE 'full' END")
    finally:
        await control.close()
    s = s.model_copy(update={"embedding_provider": "none"})
    g = await generate.ensure(s, generate.Shape(entities=entities, relations=relations), keep=False)
    await _open(s, "b")
    cells = s.model_copy(
        update={"cells": ["b"], "cell_urls": {"b": CellUrls(url=SecretStr(b_url), admin_url=SecretStr(b_admin))}}
    )
    steps: list[str] = []
    started = time.monotonic()
    mover = Mover(
        s.admin_dsn(),
        cells.every_cell(),
        timing=Timing(poll_seconds=0.02),
        progress=lambda line: steps.append(f"{line} (at {time.monotonic() - started:.2f} s)"),
    )
    load: dict[str, Any] = {"acknowledged": [], "refused": [], "latency_ns": [], "ended_at": []}
    async with env.services(cells) as (_, services):
        stop = asyncio.Event()
        writer = asyncio.create_task(_writes(services, g.tenant, interval, stop, load))
        await asyncio.sleep(1.0)
        started = time.monotonic()
        move = await mover.move(g.tenant, "b")
        ended = time.monotonic()
        await asyncio.sleep(1.0)  # writes after the switch, on the target
        stop.set()
        await writer
    # the writes in flight at any time during the move, the one the fence held among them
    spans = [(at - ns / 1e9, at, ns) for ns, at in zip(load["latency_ns"], load["ended_at"], strict=True)]
    during = [ns for began, at, ns in spans if at >= started and began <= ended]
    fence_at = _window(steps)
    held = [ns for began, at, ns in spans if began - started <= fence_at[1] and at - started >= fence_at[0]]
    found = await _found_on(b_admin, g.tenant, s, load["acknowledged"])
    counts = await _counts(b_admin, g.tenant, s)
    await mover.finish(g.tenant)
    fence = max(during) / 1e9 if during else 0.0
    return {
        "machine": {**env.machine(), "quick": quick},
        "tenant": {**counts, "generated_entities": entities, "generated_relations": relations},
        "move": {
            "seconds": round(ended - started, 2),
            "writes_fenced_s": round(fence_at[1] - fence_at[0], 3),
            "steps": [line.strip() for line in steps if " done in " in line],
            "switched": move.switched_at is not None,
            "digests_equal": move.switched_at is not None,  # the move switches only after they matched
        },
        "writes": {
            "interval_s": interval,
            "during_move": Latency.of(during).as_dict(),
            "max_pause_s": round(fence, 3),
            "during_fence": Latency.of(held).as_dict() if held else None,
            "target_s": FENCE_TARGET_SECONDS,
            "acknowledged": len(load["acknowledged"]),
            "refused": load["refused"][:5],
            "refused_count": len(load["refused"]),
            "lost": len(load["acknowledged"]) - found,
        },
    }


def _window(steps: list[str]) -> tuple[float, float]:
    """When (seconds into the move) writes were fenced: from `fence_writes` done to `switch` done."""
    at = {line.split()[0]: float(line.rsplit("at ", 1)[1].split()[0]) for line in steps if " done in " in line}
    return at.get("fence_writes", 0.0), at.get("switch", 0.0)


async def _open(s: Settings, cell: str) -> None:
    """Cell `cell` takes tenants (after the tenant was generated on `main`)."""
    conn = await asyncpg.connect(s.admin_dsn())
    try:
        await conn.execute("UPDATE engram.cells SET state = 'open' WHERE name = $1", cell)
    finally:
        await conn.close()


async def _schema(s: Settings, key: str) -> str:
    conn = await asyncpg.connect(s.admin_dsn())
    try:
        found = await conn.fetchval("SELECT schema_name FROM engram.tenants WHERE key = $1", key)
    finally:
        await conn.close()
    assert isinstance(found, str)
    return found


async def _found_on(url: str, key: str, s: Settings, names: list[str]) -> int:
    schema = await _schema(s, key)
    conn = await asyncpg.connect(url)
    try:
        return int(await conn.fetchval(f"SELECT count(*) FROM {schema}.entities WHERE name = ANY($1::text[])", names))
    finally:
        await conn.close()


async def _counts(url: str, key: str, s: Settings) -> dict[str, int]:
    schema = await _schema(s, key)
    conn = await asyncpg.connect(url)
    try:
        row = await conn.fetchrow(
            f"SELECT (SELECT count(*) FROM {schema}.entities) AS entities,"
            f" (SELECT count(*) FROM {schema}.observations) AS observations,"
            f' (SELECT count(*) FROM {schema}."REL") AS relations'
        )
    finally:
        await conn.close()
    assert row is not None
    return dict(row)


def report(r: dict[str, Any]) -> str:
    m, t, mv, w = r["machine"], r["tenant"], r["move"], r["writes"]
    d = w["during_move"]
    return "\n".join(
        [
            "## Moving a tenant",
            "",
            f"{m['date']}, {m['cpu']}, {m['nproc']} cores, {m['memory_gib']} GiB; code {m['code']}; "
            f"tenant: {t['entities']:,} entities, {t['observations']:,} observations, {t['relations']:,} relations "
            f"(on the target, after the move); one write every {w['interval_s']} s during the move.",
            "",
            "| move | writes during it | p50 | p99 | longest (the fence) | target | acknowledged | lost | refused |"
            " digests equal |",
            "|---|---|---|---|---|---|---|---|---|---|",
            f"| {mv['seconds']} s | {d['n']} | {d['p50']:.1f} ms | {d['p99']:.1f} ms | {w['max_pause_s']} s |"
            f" ≤ {w['target_s']} s | {w['acknowledged']} | {w['lost']} | {w['refused_count']} |"
            f" {mv['digests_equal']} |",
            "",
            f"Writes fenced {mv['writes_fenced_s']} s. Steps: " + "; ".join(mv["steps"]) + ".",
        ]
    )


async def main(args: argparse.Namespace) -> dict[str, Any]:
    entities, relations = QUICK_GRAPH if args.quick else (args.entities, args.relations)
    return await run(entities, relations, args.interval, args.quick)


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a small tenant")
    parser.add_argument("--entities", type=int, default=40_000)
    parser.add_argument("--relations", type=int, default=50_000)
    parser.add_argument("--interval", type=float, default=0.02, help="seconds between writes")
    parser.add_argument("--results", type=Path, help="write the raw figures here (JSON)")
    args = parser.parse_args()
    r = asyncio.run(main(args))
    if args.results:
        args.results.write_bytes(orjson.dumps(r, option=orjson.OPT_INDENT_2))
    print(report(r))
    w = r["writes"]
    if w["lost"] or w["refused_count"] or not r["move"]["digests_equal"]:
        raise SystemExit("a write was lost or refused, or the copy differed")
    if not args.quick and w["max_pause_s"] > FENCE_TARGET_SECONDS:
        raise SystemExit(f"writes paused {w['max_pause_s']} s, above the {FENCE_TARGET_SECONDS} s target")


if __name__ == "__main__":
    cli()
