"""Throughput over HTTP: one `engram serve` process, 16 concurrent real MCP clients, against the
bare SDK with a trivial tool and a bare Starlette handler, all measured in the same run.

The machine is shared, so the targets take turns: each round runs every target for the same
few seconds, one after the other, and the report gives the median over rounds, with Engram's
share of the bare SDK computed within each round (both saw the same background load).
"""

from __future__ import annotations

import random
import statistics
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx2
from mcp import Client

from app.auth.devkeys import mint_token
from app.config import Settings
from bench import procs
from bench.env import bench_dir
from bench.generate import Generated
from bench.stats import saturate
from tests.conftest import connect, free_port, server_env

ERAS = {"2025-11-25": "legacy", "2026-07-28": "2026-07-28"}
Call = Callable[[], Awaitable[bool]]


@asynccontextmanager
async def mcp_calls(
    url: str, token: str | None, mode: str, n: int, tool: str, args: Callable[[], dict[str, Any]]
) -> AsyncIterator[list[Call]]:
    """`n` connected MCP clients, each as a call of `tool` that says whether it succeeded."""

    def call_with(c: Client) -> Call:
        async def call() -> bool:
            return not (await c.call_tool(tool, args())).is_error

        return call

    async with AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(connect(url, token, mode)) for _ in range(n)]
        if mode != "legacy":
            assert clients[0].protocol_version == mode
        yield [call_with(c) for c in clients]


@asynccontextmanager
async def post_calls(url: str, n: int) -> AsyncIterator[list[Call]]:
    """`n` plain HTTP clients, each POSTing a tools/call-shaped JSON-RPC request."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "ping", "arguments": {}}}

    def call_with(h: httpx2.AsyncClient) -> Call:
        async def call() -> bool:
            return (await h.post(url, json=body)).status_code == 200

        return call

    async with AsyncExitStack() as stack:
        yield [call_with(await stack.enter_async_context(httpx2.AsyncClient())) for _ in range(n)]


@dataclass
class Target:
    label: str
    era: str
    pid: int
    calls: Callable[[], Any]  # -> an async context manager giving the list of calls


async def run(
    settings: Settings, g: Generated, seconds: float, warmup: float, rounds: int, n_clients: int = 16, say: Any = print
) -> dict[str, Any]:
    rng = random.Random(5)
    names = g.sample_names
    engram_port, mcp_port, bare_port = free_port(), free_port(), free_port()
    s = settings.model_copy(update={"port": engram_port, "dev_key_file": bench_dir() / "dev-signing-key.json"})
    with (
        procs.serve(procs.python("-m", "app.cli", "serve"), engram_port, server_env(s, engram_port)) as engram,
        procs.serve(procs.python("-m", "bench.floors", "mcp", str(mcp_port)), mcp_port) as bare_mcp,
        procs.serve(procs.python("-m", "bench.floors", "starlette", str(bare_port)), bare_port) as bare,
    ):
        token = mint_token(s, tenant=g.tenant)
        engram_url, mcp_url = f"http://127.0.0.1:{engram_port}/mcp", f"http://127.0.0.1:{mcp_port}/mcp"
        targets = []
        for era, mode in ERAS.items():
            targets += [
                Target(
                    "engram get_entity",
                    era,
                    engram.pid,
                    lambda mode=mode: mcp_calls(
                        engram_url, token, mode, n_clients, "get_entity", lambda: {"name": rng.choice(names)}
                    ),
                ),
                Target(
                    "bare MCPServer trivial tool",
                    era,
                    bare_mcp.pid,
                    lambda mode=mode: mcp_calls(mcp_url, None, mode, n_clients, "ping", lambda: {"text": "pong"}),
                ),
            ]
        targets.append(
            Target(
                "bare Starlette JSON handler",
                "-",
                bare.pid,
                lambda: post_calls(f"http://127.0.0.1:{bare_port}/mcp", n_clients),
            )
        )
        runs: dict[tuple[str, str], list[dict[str, Any]]] = {(t.label, t.era): [] for t in targets}
        for r in range(rounds):
            say(f"  round {r + 1}/{rounds}: {len(targets)} targets x {seconds:g} s, {n_clients} clients each ...")
            for t in targets:
                async with t.calls() as calls:
                    with procs.CpuWindow(t.pid) as cpu:
                        out = await saturate(calls, seconds, warmup)
                runs[(t.label, t.era)].append({**out.as_dict(), "cores": cpu.cores})
    return {"clients": n_clients, "seconds": seconds, "rounds": rounds, "runs": _summary(runs)}


def _summary(runs: dict[tuple[str, str], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    out = []
    for (label, era), rs in runs.items():
        row: dict[str, Any] = {
            "target": label,
            "era": era,
            "per_second": statistics.median(r["per_second"] for r in rs),
            "per_round": [round(r["per_second"]) for r in rs],
            "errors": sum(r["errors"] for r in rs),
            "p50_ms": statistics.median(r["latency"]["p50"] for r in rs),
            "p95_ms": statistics.median(r["latency"]["p95"] for r in rs),
            "cores": {k: statistics.median(r["cores"][k] or 0 for r in rs) for k in rs[0]["cores"]},
        }
        if label.startswith("engram"):
            bare = runs[("bare MCPServer trivial tool", era)]
            row["share_of_bare_sdk"] = statistics.median(
                r["per_second"] / b["per_second"] for r, b in zip(rs, bare, strict=True)
            )
        out.append(row)
    return out
