"""Soak: `python -m bench.soak`. N closed-loop MCP clients over HTTP, each calling the tools of a
team's day in a fixed mix (reads, searches and writes that carry text) back to back, for a stated
time after a warm-up; then the bare SDK's trivial tool with the same clients, in the same run.

Reports calls/s, p50/p99 per tool, the server's and the database's CPU, the server's resident
memory over time (its growth after the warm-up is what a leak or an unbounded cache would show),
whether every write is still there afterwards, and how long after the load stops the last pending
text has its embedding (docs/search.md, "When a fresh text is found by meaning"). Then, with the
mixed load stopped, `upsert_entities` of 100 new entities alone, call after call, and one call of
the largest batch the limits allow.

`--profile FILE` attaches py-spy to the server for the measured window (a flame graph, SVG).
`--quick` checks that the benchmark runs (a scratch database, a small graph, seconds); the test
suite runs it (tests/test_bench.py). Nothing here judges the figures; docs/benchmarks.md does.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx2
import orjson
from mcp import Client

from app.auth.devkeys import mint_token
from app.config import Settings
from bench import env, generate, over_http, procs
from bench.generate import RELATION_TYPES, VERBS, WORDS, Generated
from bench.stats import Latency, saturate
from tests.support.client import connect
from tests.support.server import free_port

MODE = "2026-07-28"
# Calls per round of the mix: reads twice as often as each other tool (as measured before).
MIX = {
    "get_entity": 2,
    "find_entities": 1,
    "neighbors": 1,
    "search": 1,
    "append_observations": 1,
    "connect_entities": 1,
    "upsert_entities": 1,
}
_CHECKED_WRITES = 200  # upserted names read back afterwards ("nothing lost")
_BACKLOG_SECONDS = 300  # how long to wait for the pending texts once the load stops
_CACHE_KB = 1.77  # one cached vector of 384 dimensions with its key (measured with tracemalloc)


def _sentence(rng: random.Random) -> str:
    return " ".join([rng.choice(WORDS).title(), rng.choice(VERBS), *rng.sample(WORDS, 3)])


class Caller:
    """One closed-loop client: the next call of the mix and its arguments, names it may use, and
    the names it created (read back at the end)."""

    def __init__(self, n: int, run: str, names: list[str], seed: int) -> None:
        self.rng = random.Random(seed)
        self.prefix = f"Soak {run} {n}"
        self.names = names
        self.created: list[str] = []
        self.i = n  # clients start at different places of the mix
        self.plan = [tool for tool, weight in MIX.items() for _ in range(weight)]

    def next(self) -> tuple[str, dict[str, Any]]:
        rng, self.i = self.rng, self.i + 1
        tool = self.plan[self.i % len(self.plan)]
        known = rng.choice(self.created) if self.created and rng.random() < 0.3 else rng.choice(self.names)
        args: dict[str, Any]
        if tool == "get_entity":
            args = {"name": known}
        elif tool == "find_entities":
            args = {"name_contains": rng.choice(WORDS), "limit": 20}
        elif tool == "neighbors":
            args = {"entity": known, "depth": 2, "limit": 50}
        elif tool == "search":
            args = {"query": f"who {rng.choice(VERBS)} the {rng.choice(WORDS)} {rng.choice(WORDS)}", "limit": 10}
        elif tool == "append_observations":
            args = {"items": [{"entity": known, "observations": [_sentence(rng)]}]}
        elif tool == "connect_entities":
            ends = {"from": known, "to": rng.choice(self.names), "type": rng.choice(list(RELATION_TYPES))}
            args = {"relations": [ends]}
        else:
            made = [f"{self.prefix} {self.i} {k}" for k in range(rng.randint(1, 3))]
            args = {"entities": [{"name": m, "type": "note", "observations": [_sentence(rng)]} for m in made]}
        return tool, args


class Tally:
    """Latency samples and errors per tool, and `embeddings_pending` summed over the writes."""

    def __init__(self) -> None:
        self.samples: dict[str, list[int]] = {t: [] for t in MIX}
        self.errors: dict[str, int] = dict.fromkeys(MIX, 0)
        self.pending = 0
        self.messages: list[str] = []

    def add(self, tool: str, ns: int, ok: bool, message: str = "") -> None:
        self.samples[tool].append(ns)
        if not ok:
            self.errors[tool] += 1
            if len(self.messages) < 10:
                self.messages.append(f"{tool}: {message[:200]}")

    def summary(self, seconds: float) -> dict[str, Any]:
        tools = {
            t: {**Latency.of(s).as_dict(), "errors": self.errors[t], "per_second": round(len(s) / seconds, 1)}
            for t, s in self.samples.items()
            if s
        }
        calls = sum(len(s) for s in self.samples.values())
        return {
            "calls": calls,
            "per_second": round(calls / seconds, 1),
            "errors": sum(self.errors.values()),
            "error_messages": self.messages,
            "embeddings_pending_reported": self.pending,
            "tools": tools,
        }


async def _loop(client: Client, caller: Caller, tally: Callable[[], Tally | None], stop: asyncio.Event) -> None:
    while not stop.is_set():
        tool, args = caller.next()
        started = time.perf_counter_ns()
        try:
            result = await client.call_tool(tool, args)
            ok, message = not result.is_error, str(result.content[0].text if result.is_error else "")  # type: ignore[union-attr]
        except Exception as exc:
            result, ok, message = None, False, f"{type(exc).__name__}: {exc}"
        took = time.perf_counter_ns() - started
        if ok and tool == "upsert_entities":
            caller.created += [e["name"] for e in args["entities"]]
        if (t := tally()) is not None:
            t.add(tool, took, ok, message)
            if ok and result is not None and result.structured_content:
                t.pending += int(result.structured_content.get("embeddings_pending", 0))


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def _sample_rss(pid: int, every: float, into: list[tuple[float, float]], stop: asyncio.Event) -> None:
    started = time.monotonic()
    while not stop.is_set():
        into.append((round(time.monotonic() - started, 1), round(rss_mb(pid), 1)))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every)


def cached_vectors(metrics_port: str) -> float | None:
    """The server's `engram_embedding_cache_vectors`: the bounded cache that grows with new texts."""
    try:
        text = httpx2.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).text
    except httpx2.TransportError:
        return None
    found = [line.split()[-1] for line in text.splitlines() if line.startswith("engram_embedding_cache_vectors ")]
    return float(found[0]) if found else 0.0


def rss_summary(series: list[tuple[float, float]], warmup: float) -> dict[str, Any]:
    """Resident memory at the end of the warm-up and at the end (each the median of its last few
    samples, so one sample's noise is not growth), and the growth between."""
    before = [mb for t, mb in series if t <= warmup][-5:] or [series[0][1]]
    after = [mb for _, mb in series][-5:]
    start, end = statistics.median(before), statistics.median(after)
    highest = max(mb for _, mb in series)
    return {"after_warmup_mb": start, "end_mb": end, "growth_mb": round(end - start, 1), "max_mb": highest}


async def _backlog_seconds(client: Client) -> float | None:
    """Seconds until search stops noting texts that wait for an embedding (None: not within the bound)."""
    started = time.monotonic()
    while time.monotonic() - started < _BACKLOG_SECONDS:
        out = (await client.call_tool("search", {"query": "cedar", "limit": 1})).structured_content or {}
        if not any("embedding" in n for n in out.get("notices", [])):
            return round(time.monotonic() - started, 1)
        await asyncio.sleep(0.5)
    return None


async def bulk_upserts(client: Client, run: str, calls: int, rng: random.Random) -> dict[str, Any]:
    """`upsert_entities` alone, one call after another: `calls` of 100 new entities with one
    observation each, then one of the largest batch the limits allow (100 entities, 1,000
    observations over all)."""

    async def upsert(label: str, per_entity: int) -> tuple[int, int]:
        observations = [[_sentence(rng) for _ in range(per_entity)] for _ in range(100)]
        entities = [
            {"name": f"Bulk {run} {label} {i}", "type": "note", "observations": o} for i, o in enumerate(observations)
        ]
        started = time.perf_counter_ns()
        result = await client.call_tool("upsert_entities", {"entities": entities})
        took = time.perf_counter_ns() - started
        if result.is_error:
            raise RuntimeError(f"bulk upsert failed: {result.content}")
        return took, int((result.structured_content or {}).get("embeddings_pending", 0))

    done = [await upsert(str(k), 1) for k in range(calls)]
    largest, largest_pending = await upsert("largest", 10)
    return {
        "entities_per_call": 100,
        "latency": Latency.of([ns for ns, _ in done]).as_dict(),
        "embeddings_pending_mean": statistics.fmean(p for _, p in done),
        "largest_batch_ms": round(largest / 1e6, 1),
        "largest_batch_pending": largest_pending,
    }


async def _lost(client: Client, callers: list[Caller]) -> int:
    """Upserted entities that a read no longer finds (a sample of them)."""
    made = [n for c in callers for n in c.created]
    sample = random.Random(3).sample(made, min(len(made), _CHECKED_WRITES))
    lost = 0
    for name in sample:
        lost += (await client.call_tool("get_entity", {"name": name, "include_relations": False})).is_error
    return lost


async def run(
    settings: Settings,
    g: Generated,
    *,
    clients: int,
    seconds: float,
    warmup: float,
    floor_seconds: float,
    rss_every: float,
    bulk_calls: int = 16,
    profile: Path | None = None,
    say: Any = print,
) -> dict[str, Any]:
    engram_port, mcp_port = free_port(), free_port()
    s = settings.model_copy(update={"port": engram_port, "dev_key_file": env.bench_dir() / "dev-signing-key.json"})
    database = s.runtime_dsn().rsplit("/", 1)[1].split("?", 1)[0]
    run_id = uuid.uuid4().hex[:6]
    # The configured write budget (the test suite's servers wait longer for their vectors).
    budget = {"ENGRAM_EMBED_WRITE_BUDGET_MS": str(s.embed_write_budget_ms)}
    engram_env = over_http.engram_env(s, engram_port, clients) | budget
    with (
        procs.serve(procs.python("-m", "app.cli", "serve"), engram_port, engram_env) as engram,
        procs.serve(procs.python("-m", "bench.floors", "mcp", str(mcp_port)), mcp_port) as bare,
    ):
        url, token = f"http://127.0.0.1:{engram_port}/mcp", mint_token(s, tenant=g.tenant)
        callers = [Caller(n, run_id, g.sample_names, seed=n) for n in range(clients)]
        tally: Tally | None = None
        stop, rss_stop = asyncio.Event(), asyncio.Event()
        series: list[tuple[float, float]] = []
        async with AsyncExitStack() as stack:
            conns = [await stack.enter_async_context(connect(url, token, MODE)) for _ in range(clients)]
            say(f"  {clients} clients: {warmup:g} s warm-up, then {seconds:g} s measured ...")
            sampler = asyncio.create_task(_sample_rss(engram.pid, rss_every, series, rss_stop))
            loops = [asyncio.create_task(_loop(c, k, lambda: tally, stop)) for c, k in zip(conns, callers, strict=True)]
            await asyncio.sleep(warmup)
            cached = [cached_vectors(engram_env["ENGRAM_METRICS_PORT"])]
            with over_http.py_spy(engram.pid, profile), procs.CpuWindow(engram.pid, database) as cpu:
                tally, started = Tally(), time.monotonic()
                await asyncio.sleep(seconds)
                measured, tally = tally, None
                elapsed = time.monotonic() - started
            cached.append(cached_vectors(engram_env["ENGRAM_METRICS_PORT"]))
            stop.set()
            await asyncio.gather(*loops)
            rss_stop.set()
            await sampler
            backlog = await _backlog_seconds(conns[0])
            say(f"  upsert_entities alone: {bulk_calls} calls of 100 new entities, then the largest batch ...")
            bulk = await bulk_upserts(conns[0], run_id, bulk_calls, random.Random(11))
            lost = await _lost(conns[0], callers)
        say(f"  the floor: the bare SDK's trivial tool, {clients} clients, {floor_seconds:g} s ...")
        async with over_http.mcp_calls(f"http://127.0.0.1:{mcp_port}/mcp", None, MODE, clients, "ping", dict) as calls:
            with procs.CpuWindow(bare.pid) as floor_cpu:
                floor = await saturate(calls, floor_seconds, 0)
    out = measured.summary(elapsed)
    return {
        "clients": clients,
        "seconds": round(elapsed, 1),
        "warmup_seconds": warmup,
        "mix": MIX,
        **out,
        "cores": cpu.cores,
        "cpu_ms_per_call": over_http._per_call(cpu.seconds, out["calls"]),
        "rss": {**rss_summary(series, warmup), "series": series},
        # The embedding cache's vectors after the warm-up and at the end: growth the bound explains.
        "cache_vectors": cached,
        "lost_writes": lost,
        "checked_writes": min(_CHECKED_WRITES, sum(len(c.created) for c in callers)),
        "backlog_embedded_after_s": backlog,
        "bulk_alone": bulk,
        "floor": {
            **floor.as_dict(),
            "cores": floor_cpu.cores,
            "cpu_ms_per_call": over_http._per_call(floor_cpu.seconds, floor.calls),
        },
    }


def problems(r: dict[str, Any]) -> list[str]:
    """Why the figures are incomplete (nothing about speed): calls failed, writes lost, no floor."""
    found = []
    if not r.get("calls"):
        found.append("no calls measured")
    if r.get("errors"):
        found.append(f"{r['errors']} calls failed: {r['error_messages']}")
    if r.get("lost_writes"):
        found.append(f"{r['lost_writes']} of {r['checked_writes']} upserted entities not found afterwards")
    if not r.get("floor", {}).get("calls") or r["floor"].get("errors"):
        found.append(f"the floor: {r.get('floor')}")
    if r.get("backlog_embedded_after_s") is None:
        found.append(f"pending texts still waiting {_BACKLOG_SECONDS} s after the load stopped")
    return found


def report(r: dict[str, Any]) -> str:
    rows = [
        f"| {t} | {x['n']:,} | {x['per_second']:.1f} | {x['p50']:.0f} | {x['p99']:.0f} | {x['max']:.0f} "
        f"| {x['errors']} |"
        for t, x in sorted(r["tools"].items(), key=lambda kv: -kv[1]["p99"])
    ]
    f, rss, cores, cpu, b = r["floor"], r["rss"], r["cores"], r["cpu_ms_per_call"], r["bulk_alone"]
    minutes = [mb for t, mb in r["rss"]["series"] if t >= r["warmup_seconds"]][:: max(1, len(rss["series"]) // 12)]
    return "\n".join(
        [
            f"{r['clients']} clients, {r['seconds']:g} s measured after {r['warmup_seconds']:g} s of warm-up; "
            f"load average {r.get('load_average')}.",
            "",
            "| tool | calls | calls/s | p50 ms | p99 ms | max ms | errors |",
            "|---|---|---|---|---|---|---|",
            *rows,
            "",
            f"All: **{r['per_second']:.1f} calls/s**, {r['errors']} errors; "
            f"bare SDK trivial tool, same clients: {f['per_second']:.0f} calls/s, p50 {f['latency']['p50']:.1f} ms.",
            f"CPU: server {cores['server']} cores ({cpu['server'] or 0:.1f} ms per call), database "
            f"{cores['database']} cores ({cpu['database'] or 0:.1f} ms per call), machine {cores['machine']} cores.",
            f"RSS: {rss['after_warmup_mb']:.0f} MB after warm-up, {rss['end_mb']:.0f} MB at the end "
            f"(**{rss['growth_mb']:+.1f} MB**), highest {rss['max_mb']:.0f} MB; over time: "
            + ", ".join(f"{mb:.0f}" for mb in minutes)
            + f". Embedding cache: {r['cache_vectors'][0]:,.0f} → {r['cache_vectors'][1]:,.0f} vectors "
            f"(about {_CACHE_KB * (r['cache_vectors'][1] - r['cache_vectors'][0]) / 1024:+.1f} MB of that growth).",
            f"Writes: {r['embeddings_pending_reported']:,} texts left pending by the calls; the last embedded "
            f"{r['backlog_embedded_after_s']} s after the load stopped; {r['lost_writes']} of "
            f"{r['checked_writes']} upserted entities missing afterwards.",
            "",
            f"`upsert_entities` alone, {b['latency']['n']} calls of 100 new entities with one observation each: "
            f"p50 **{b['latency']['p50']:.0f} ms**, max {b['latency']['max']:.0f} ms, "
            f"{b['embeddings_pending_mean']:.0f} texts pending per call on average; the largest batch the limits "
            f"allow (100 entities, 1,000 observations): {b['largest_batch_ms']:.0f} ms, "
            f"{b['largest_batch_pending']:,} texts pending.",
        ]
    )


async def main(args: argparse.Namespace) -> dict[str, Any]:
    s = env.settings()
    if args.quick:
        s = await env.fresh_database(s, env.scratch_name("soak"))
    shape = generate.Shape(entities=args.entities, relations=args.relations)
    g = await generate.ensure(s, shape, keep=not args.quick)
    results: dict[str, Any] = {"machine": env.machine()}
    results["machine"]["quick"] = args.quick
    results["soak"] = await run(
        s,
        g,
        clients=args.clients,
        seconds=args.seconds,
        warmup=args.warmup,
        floor_seconds=args.floor_seconds,
        rss_every=args.rss_every,
        bulk_calls=args.bulk_calls,
        profile=args.profile,
    )
    results["soak"]["load_average"] = [round(x, 2) for x in os.getloadavg()]
    results["soak"]["graph"] = {"entities": shape.entities, "relations": shape.relations}
    return results


def cli() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small graph in a scratch database, a few seconds")
    parser.add_argument("--clients", type=int, help="concurrent clients (default 16; quick 4)")
    parser.add_argument("--seconds", type=float, help="measured seconds (default 600; quick 6)")
    parser.add_argument("--warmup", type=float, help="seconds of load before measuring (default 60; quick 2)")
    parser.add_argument("--floor-seconds", type=float, help="seconds of the bare SDK floor (default 30; quick 2)")
    parser.add_argument("--rss-every", type=float, help="seconds between RSS samples (default 5; quick 0.5)")
    parser.add_argument("--bulk-calls", type=int, help="upserts of 100 entities alone afterwards (default 16; quick 2)")
    parser.add_argument("--entities", type=int, help="entities in the graph (default 100,000; quick 1,500)")
    parser.add_argument("--relations", type=int, help="relations in the graph (default 500,000; quick 6,000)")
    parser.add_argument("--profile", type=Path, help="a py-spy flame graph (SVG) of the server, measured window")
    parser.add_argument("--results", type=Path, help="where to keep the raw figures (JSON)")
    args = parser.parse_args()
    defaults = {
        "clients": (4, 16),
        "seconds": (6, 600),
        "warmup": (2, 60),
        "floor_seconds": (2, 30),
        "rss_every": (0.5, 5),
        "bulk_calls": (2, 16),
        "entities": (1_500, 100_000),
        "relations": (6_000, 500_000),
    }
    for key, (quick, full) in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, quick if args.quick else full)
    results = asyncio.run(main(args))
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = args.results or env.bench_dir() / ("soak-quick.json" if args.quick else f"soak-{stamp}.json")
    path.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    print("\n## Soak\n")
    print(report(results["soak"]))
    print(f"\nraw figures: {path}")
    wrong = problems(results["soak"])
    for line in wrong:
        print(f"FAILED {line}", file=sys.stderr)
    if wrong:
        sys.exit(1)


if __name__ == "__main__":
    cli()
