"""The reference `@modelcontextprotocol/server-memory` (stdio, one JSONL file) against Engram's
drop-in memory dialect (HTTP, PostgreSQL) on the reference's nine tools, at 1k and 10k entities.

Both are driven by the same Python SDK client, one call at a time, on the handshake-era protocol
the reference speaks. The transports differ (a pipe to a child process vs HTTP to a server with
auth and a database that commits to disk), and so does the work of two tools: the reference's
read_graph returns the whole graph and its search_nodes every match, Engram's return a bounded
page. The report says so beside the figures.
"""

from __future__ import annotations

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
from bench.stats import Latency, timed
from tests.conftest import connect, free_port, server_env

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


async def _call(c: Client, tool: str, args: dict[str, Any]) -> None:
    result = await c.call_tool(tool, args)
    if result.is_error:
        raise RuntimeError(f"{tool} failed: {result.content}")


async def _seed(c: Client, n: int) -> dict[str, float]:
    entities, relations = _data(n)
    started = time.monotonic()
    for lo in range(0, len(entities), 100):
        await _call(c, "create_entities", {"entities": entities[lo : lo + 100]})
    mid = time.monotonic()
    for lo in range(0, len(relations), 100):
        await _call(c, "create_relations", {"relations": relations[lo : lo + 100]})
    end = time.monotonic()
    return {
        "entities_per_s": round(len(entities) / (mid - started)),
        "relations_per_s": round(len(relations) / (end - mid)),
        "relations": len(relations),
    }


async def _tools(c: Client, n: int, iterations: int) -> dict[str, Latency]:
    rng = random.Random(1)
    run = uuid.uuid4().hex[:6]
    names = [f"Entity {i}" for i in range(n)]
    picks = [rng.choice(names) for _ in range(iterations + 2)]
    rel = {"relationType": "benchmarks"}
    ops: dict[str, Callable[[int], Awaitable[None]]] = {
        "create_entities": lambda i: _call(
            c,
            "create_entities",
            {"entities": [{"name": f"New {run} {i}", "entityType": "note", "observations": ["x"]}]},
        ),
        "create_relations": lambda i: _call(
            c, "create_relations", {"relations": [{"from": f"New {run} {i}", "to": picks[i], **rel}]}
        ),
        "add_observations": lambda i: _call(
            c, "add_observations", {"observations": [{"entityName": picks[i], "contents": [f"seen {run} {i}"]}]}
        ),
        "delete_observations": lambda i: _call(
            c, "delete_observations", {"deletions": [{"entityName": picks[i], "observations": [f"seen {run} {i}"]}]}
        ),
        "delete_relations": lambda i: _call(
            c, "delete_relations", {"relations": [{"from": f"New {run} {i}", "to": picks[i], **rel}]}
        ),
        "delete_entities": lambda i: _call(c, "delete_entities", {"entityNames": [f"New {run} {i}"]}),
        "read_graph": lambda i: _call(c, "read_graph", {}),
        "search_nodes": lambda i: _call(c, "search_nodes", {"query": picks[i]}),
        "open_nodes": lambda i: _call(c, "open_nodes", {"names": rng.sample(names, 5)}),
    }
    # Warm-up calls use negative indexes: they create and delete their own entities too.
    return {tool: await timed(ops[tool], iterations, 2) for tool in TOOLS}


async def drop_tenant(settings: Settings, key: str) -> None:
    conn = await asyncpg.connect(settings.admin_dsn())
    try:
        await tenants.delete(conn, key)
    finally:
        await conn.close()


async def run(settings: Settings, sizes: list[int], iterations: int, say: Any = print) -> dict[str, Any]:
    script = reference_script()
    port = free_port()
    s = settings.model_copy(update={"port": port, "dev_key_file": bench_dir() / "dev-signing-key.json"})
    out: dict[str, Any] = {"reference": f"{PACKAGE}@{VERSION}", "sizes": {}}
    with procs.serve(procs.python("-m", "app.cli", "serve"), port, server_env(s, port)):
        for n in sizes:
            memory = bench_dir() / f"reference-memory-{n}.jsonl"
            memory.unlink(missing_ok=True)
            params = StdioServerParameters(command="node", args=[str(script)], env={"MEMORY_FILE_PATH": str(memory)})
            tenant = f"bench-ref-{n}-{uuid.uuid4().hex[:8]}"
            sides: dict[str, AbstractAsyncContextManager[Client]] = {
                "reference (stdio, JSONL file)": Client(params, mode="legacy"),
                "engram memory dialect (HTTP, PostgreSQL)": connect(
                    f"http://127.0.0.1:{port}/mcp", mint_token(s, tenant=tenant), "legacy"
                ),
            }
            row: dict[str, Any] = {}
            for side, client in sides.items():
                say(f"  {side}, {n:,} entities: seeding ...")
                async with client as c:
                    seeded = await _seed(c, n)
                    say(f"  {side}, {n:,} entities: nine tools x {iterations} ...")
                    tools = await _tools(c, n, iterations)
                    row[side] = {"seed": seeded, "tools": {k: v.as_dict() for k, v in tools.items()}}
                    if side.startswith("engram"):
                        # Right after an import the new tables have no planner statistics until
                        # autovacuum's next round (up to a minute): measure again once they have.
                        await analyze(settings, tenant)
                        tools = await _tools(c, n, iterations)
                        row[side]["tools_analyzed"] = {k: v.as_dict() for k, v in tools.items()}
            if memory.exists():
                row["reference_file_bytes"] = memory.stat().st_size
            out["sizes"][str(n)] = row
            await drop_tenant(settings, tenant)
    return out


if __name__ == "__main__":  # `python -m bench.reference`: install the reference once, so quick runs include it
    print(missing(install=True) or f"{PACKAGE}@{VERSION} is installed in {bench_dir() / 'npm'}")
