"""The reference `@modelcontextprotocol/server-memory` (stdio, one JSONL file) against Engram's
drop-in memory dialect (HTTP, PostgreSQL) on the reference's nine tools, at 1k, 10k and 100k entities.

Both are driven by the same Python SDK client, one call at a time, on the handshake-era protocol
the reference speaks. The transports differ (a pipe to a child process vs HTTP to a server with
auth and a database that commits to disk), and so does the work of two tools: the reference's
read_graph returns the whole graph and its search_nodes every match, Engram's return a bounded
page. The report says so beside the figures.

The reference rereads and rewrites its whole file on every call, and its create_relations compares
each new relation with every stored one, so its cost grows with the square of the graph: its run
time is bounded per size. Seeding through its create calls stops after `SEED_SECONDS`; the rest of
the same data is then written into its file directly, in its own format (what its create calls
would have written), and the report says how much went through calls. Its nine tools are measured
in rounds (one call of each tool per round) until `TOOL_SECONDS` have passed; the rounds not run
are skipped, and the report says so.
"""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import subprocess
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import asyncpg
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from app.auth.devkeys import mint_token
from app.config import Settings
from app.store import tenants
from bench import procs
from bench.env import bench_dir
from bench.generate import analyze
from bench.stats import Latency
from tests.support.client import connect
from tests.support.server import free_port, server_env

PACKAGE = "@modelcontextprotocol/server-memory"
VERSION = "2026.8.31"
TYPES = ["person", "project", "concept", "organization", "document"]
TOOLS = (
    "create_entities",
    "create_relations",
    "add_observations",
    "delete_observations",
    "delete_relations",
    "delete_entities",
    "read_graph",
    "search_nodes",
    "open_nodes",
)
SIZES = (1_000, 10_000, 100_000)
QUICK_SIZES = (200,)
REFERENCE = "reference (stdio, JSONL file)"
ENGRAM = "engram memory dialect (HTTP, PostgreSQL)"
# Bounds on the reference's run time, per size.
SEED_SECONDS = 300.0
TOOL_SECONDS = 300.0
# Right after an import of this many entities, no call of Engram's may take longer than this.
FRESH_IMPORT = (10_000, 50.0)
# Engram's speed-up over the reference wanted at each size, on every tool (p50, fresh statistics).
TARGETS = {1_000: 1.0, 10_000: 5.0, 100_000: 20.0}


def missing(*, install: bool) -> str | None:
    """Why the reference cannot run here, or None. With `install`, npm installs it when absent (once)."""
    if shutil.which("node") is None:
        return "node is not installed"
    if _installed().exists():
        return None
    if not install:
        return f"{PACKAGE}@{VERSION} is not installed (a full run installs it once with npm)"
    if shutil.which("npm") is None:
        return "npm is needed to install the reference server-memory"
    reference_script()
    return None


def _installed() -> Path:
    return bench_dir() / "npm" / f".installed-{VERSION}"


def reference_script() -> Path:
    """The reference server's entry point, installed once with npm into the bench state directory."""
    prefix = bench_dir() / "npm"
    script = prefix / "node_modules" / PACKAGE / "dist" / "index.js"
    installed = _installed()
    if not installed.exists():
        if shutil.which("npm") is None:
            raise RuntimeError("npm is needed for the reference server-memory comparison")
        subprocess.run(
            [
                "npm",
                "install",
                "--prefix",
                str(prefix),
                "--no-audit",
                "--no-fund",
                "--loglevel=error",
                f"{PACKAGE}@{VERSION}",
            ],
            check=True,
        )
        installed.touch()
    return script


def _data(n: int) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    rng = random.Random(n)
    entities = [
        {
            "name": f"Entity {i}",
            "entityType": rng.choice(TYPES),
            "observations": [f"fact {k} about entity {i}: {rng.random():.6f}" for k in range(3)],
        }
        for i in range(n)
    ]
    relations = [
        {"from": f"Entity {i}", "to": f"Entity {j}", "relationType": rng.choice(["knows", "uses"])}
        for i in range(n)
        for j in rng.sample(range(n), 2)
        if j != i
    ]
    return entities, relations


def write_reference_file(path: Path, entities: list[dict[str, Any]], relations: list[dict[str, str]]) -> None:
    """The graph as the reference's own saveGraph writes it: one JSON object a line, entities first."""
    lines = [json.dumps({"type": "entity", **e}, separators=(",", ":"), ensure_ascii=False) for e in entities] + [
        json.dumps({"type": "relation", **r}, separators=(",", ":"), ensure_ascii=False) for r in relations
    ]
    temp = path.with_name(path.name + ".seed")
    temp.write_text("\n".join(lines))
    temp.rename(path)


async def _call(c: Client, tool: str, args: dict[str, Any]) -> None:
    result = await c.call_tool(tool, args)
    if result.is_error:
        raise RuntimeError(f"{tool} failed: {result.content}")


async def _seed_call(c: Client, tool: str, args: dict[str, Any], retried: list[str]) -> None:
    """A seeding call; one answered `unavailable` (a missed deadline on a loaded machine) is made
    again after its retry_after, up to 3 times, and counted in `retried`."""
    for attempt in range(4):
        result = await c.call_tool(tool, args)
        if not result.is_error:
            return
        text = str(result.content)
        if "unavailable" not in text or attempt == 3:
            raise RuntimeError(f"{tool} failed: {text}")
        retried.append(text[:200])
        await asyncio.sleep(5)


async def _seed(c: Client, n: int, seconds: float = float("inf"), file: Path | None = None) -> dict[str, Any]:
    """Write the size's data through create_entities / create_relations in batches of 100. Past
    `seconds`, the rest is written into `file` directly (the reference only)."""
    entities, relations = _data(n)
    started = time.monotonic()
    stop_at = started + seconds
    done_entities = done_relations = 0
    retried: list[str] = []
    for lo in range(0, len(entities), 100):
        if time.monotonic() > stop_at:
            break
        await _seed_call(c, "create_entities", {"entities": entities[lo : lo + 100]}, retried)
        done_entities = min(lo + 100, len(entities))
    mid = time.monotonic()
    if done_entities == len(entities):
        for lo in range(0, len(relations), 100):
            if time.monotonic() > stop_at:
                break
            await _seed_call(c, "create_relations", {"relations": relations[lo : lo + 100]}, retried)
            done_relations = min(lo + 100, len(relations))
    end = time.monotonic()
    out: dict[str, Any] = {
        "entities_per_s": round(done_entities / (mid - started)) if done_entities else None,
        "relations_per_s": round(done_relations / (end - mid)) if done_relations else None,
        "relations": len(relations),
        "seconds": round(end - started, 1),
    }
    if retried:
        out["retried_calls"] = {"count": len(retried), "first": retried[0]}
    if done_entities < len(entities) or done_relations < len(relations):
        if file is None:
            raise RuntimeError(f"seeding stopped at {done_entities} entities, {done_relations} relations")
        write_reference_file(file, entities, relations)
        out["bounded"] = {
            "seconds": seconds,
            "entities_by_calls": done_entities,
            "relations_by_calls": done_relations,
        }
    return out


def _ops(c: Client, n: int) -> dict[str, Callable[[int], Awaitable[None]]]:
    rng = random.Random(1)
    run = uuid.uuid4().hex[:6]
    names = [f"Entity {i}" for i in range(n)]
    picks: dict[int, str] = {}

    def pick(i: int) -> str:
        return picks.setdefault(i, rng.choice(names))

    rel = {"relationType": "benchmarks"}
    return {
        "create_entities": lambda i: _call(
            c,
            "create_entities",
            {"entities": [{"name": f"New {run} {i}", "entityType": "note", "observations": ["x"]}]},
        ),
        "create_relations": lambda i: _call(
            c, "create_relations", {"relations": [{"from": f"New {run} {i}", "to": pick(i), **rel}]}
        ),
        "add_observations": lambda i: _call(
            c, "add_observations", {"observations": [{"entityName": pick(i), "contents": [f"seen {run} {i}"]}]}
        ),
        "delete_observations": lambda i: _call(
            c, "delete_observations", {"deletions": [{"entityName": pick(i), "observations": [f"seen {run} {i}"]}]}
        ),
        "delete_relations": lambda i: _call(
            c, "delete_relations", {"relations": [{"from": f"New {run} {i}", "to": pick(i), **rel}]}
        ),
        "delete_entities": lambda i: _call(c, "delete_entities", {"entityNames": [f"New {run} {i}"]}),
        "read_graph": lambda i: _call(c, "read_graph", {}),
        "search_nodes": lambda i: _call(c, "search_nodes", {"query": pick(i)}),
        "open_nodes": lambda i: _call(c, "open_nodes", {"names": rng.sample(names, 5)}),
    }


async def _tools(c: Client, n: int, iterations: int, seconds: float = float("inf")) -> dict[str, Any]:
    """The nine tools in rounds, one call of each per round (in TOOLS order, which each round's
    deletes rely on), after 2 untimed rounds; rounds stop after `seconds`."""
    ops = _ops(c, n)
    for i in range(-2, 0):  # warm-up: negative indexes create and delete their own entities too
        for tool in TOOLS:
            await ops[tool](i)
    samples: dict[str, list[int]] = {tool: [] for tool in TOOLS}
    stop_at = time.monotonic() + seconds
    rounds = 0
    for i in range(iterations):
        if time.monotonic() > stop_at:
            break
        for tool in TOOLS:
            t0 = time.perf_counter_ns()
            await ops[tool](i)
            samples[tool].append(time.perf_counter_ns() - t0)
        rounds += 1
    out: dict[str, Any] = {"latency": {t: Latency.of(s).as_dict() for t, s in samples.items() if s}}
    if rounds < iterations:
        out["bounded"] = {"seconds": seconds, "rounds": rounds, "of": iterations}
    return out


async def drop_tenant(settings: Settings, key: str) -> None:
    conn = await asyncpg.connect(settings.admin_dsn())
    try:
        await tenants.delete(conn, key)
    finally:
        await conn.close()


def _slowest(tools: dict[str, Any]) -> tuple[str, float]:
    tool, lat = max(tools["latency"].items(), key=lambda kv: kv[1]["max"])
    return tool, lat["max"]


async def run(
    settings: Settings,
    sizes: list[int],
    iterations: int,
    say: Any = print,
    seed_seconds: float = SEED_SECONDS,
    tool_seconds: float = TOOL_SECONDS,
) -> dict[str, Any]:
    script = reference_script()
    port = free_port()
    s = settings.model_copy(update={"port": port, "dev_key_file": bench_dir() / "dev-signing-key.json"})
    out: dict[str, Any] = {
        "reference": f"{PACKAGE}@{VERSION}",
        "bounds": {"seed_seconds": seed_seconds, "tool_seconds": tool_seconds},
        "sizes": {},
    }
    floor_port = free_port()
    with (
        procs.serve(procs.python("-m", "app.cli", "serve"), port, server_env(s, port)),
        procs.serve(procs.python("-m", "bench.floors", "mcp", str(floor_port)), floor_port),
    ):
        say("  floor: a bare MCPServer's trivial tool over HTTP, one call at a time ...")
        out["floor"] = await _floor(f"http://127.0.0.1:{floor_port}/mcp", iterations)
        for n in sizes:
            memory = bench_dir() / f"reference-memory-{n}.jsonl"
            memory.unlink(missing_ok=True)
            params = StdioServerParameters(command="node", args=[str(script)], env={"MEMORY_FILE_PATH": str(memory)})
            tenant = f"bench-ref-{n}-{uuid.uuid4().hex[:8]}"
            sides: dict[str, AbstractAsyncContextManager[Client]] = {
                REFERENCE: Client(params, mode="legacy"),
                ENGRAM: connect(f"http://127.0.0.1:{port}/mcp/memory", mint_token(s, tenant=tenant), "legacy"),
            }
            row: dict[str, Any] = {}
            try:
                await _size(row, sides, n, iterations, settings, tenant, memory, say, seed_seconds, tool_seconds)
            except Exception as exc:  # one size failing does not lose the others' figures
                say(f"  {n:,} entities failed: {type(exc).__name__}: {exc}")
                row["error"] = f"{type(exc).__name__}: {exc}"
            finally:
                await drop_tenant(settings, tenant)
            if memory.exists():
                row["reference_file_bytes"] = memory.stat().st_size
            row["ratios"] = _ratios(row)
            out["sizes"][str(n)] = row
    return out


async def _size(
    row: dict[str, Any],
    sides: dict[str, AbstractAsyncContextManager[Client]],
    n: int,
    iterations: int,
    settings: Settings,
    tenant: str,
    memory: Path,
    say: Any,
    seed_seconds: float,
    tool_seconds: float,
) -> None:
    """One size: each side seeded, then the nine tools (Engram's twice: just imported, and with statistics)."""
    for side, client in sides.items():
        say(f"  {side}, {n:,} entities: seeding ...")
        async with client as c:
            if side == REFERENCE:
                seeded = await _seed(c, n, seed_seconds, memory)
            else:
                seeded = await _seed(c, n)
            if "bounded" in seeded:
                b = seeded["bounded"]
                done = f"{b['entities_by_calls']:,} entities, {b['relations_by_calls']:,} relations"
                say(f"  {side}: seeding stopped at {b['seconds']:g} s ({done} by calls); the rest filed")
            say(f"  {side}, {n:,} entities: nine tools x {iterations} ...")
            bound = tool_seconds if side == REFERENCE else float("inf")
            tools = await _tools(c, n, iterations, bound)
            if "bounded" in tools:
                say(f"  {side}: tools bounded at {bound:g} s after {tools['bounded']['rounds']} rounds")
            row[side] = {"seed": seeded, "tools": tools["latency"], "tools_bounded": tools.get("bounded")}
            if side == ENGRAM:
                tool, slowest = _slowest(tools)
                row[side]["slowest_just_imported"] = {"tool": tool, "ms": slowest}
                # Right after an import the new tables have no planner statistics until
                # autovacuum's next round (up to a minute): measure again once they have.
                await analyze(settings, tenant)
                row[side]["tools_analyzed"] = (await _tools(c, n, iterations))["latency"]


async def _floor(url: str, iterations: int) -> dict[str, float]:
    """The latency of a call that does nothing, through the same client, transport options and
    server loop as Engram's: what HTTP and the SDK cost before any work (no auth, no database)."""
    samples = []
    async with connect(url, None, "legacy") as c:
        for i in range(-5, max(iterations, 20)):
            t0 = time.perf_counter_ns()
            await _call(c, "ping", {"text": "pong"})
            if i >= 0:
                samples.append(time.perf_counter_ns() - t0)
    return Latency.of(samples).as_dict()


def _ratios(row: dict[str, Any]) -> dict[str, float]:
    """Reference p50 / Engram p50 (fresh statistics), per tool measured on both sides."""
    ref, eng = row.get(REFERENCE, {}).get("tools", {}), row.get(ENGRAM, {}).get("tools_analyzed", {})
    return {t: ref[t]["p50"] / eng[t]["p50"] for t in TOOLS if t in ref and t in eng and eng[t]["p50"]}


if __name__ == "__main__":  # `python -m bench.reference`: install the reference once, so quick runs include it
    print(missing(install=True) or f"{PACKAGE}@{VERSION} is installed in {bench_dir() / 'npm'}")
