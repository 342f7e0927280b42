"""Throughput over HTTP: one `engram serve` process, 16 concurrent real MCP clients, against the
bare SDK with a trivial tool and a bare Starlette handler, all measured in the same run.

The machine is shared, so the targets take turns: each round runs every target for the same
few seconds, one after the other, and the report gives the median over rounds, with Engram's
share of the bare SDK computed within each round (both saw the same background load).

Beside calls/s, each target's CPU per call: the server process's (user + system time over the
timed window, divided by the calls answered in it) and the database's (the backends connected to
the benchmark's database). Three MCP targets per protocol era: `get_entity`, an Engram tool that
touches no database (the same server, auth, scope check, admission, deadline and middleware; its
body returns its argument), and the bare SDK's trivial tool.

`python -m bench.over_http --profile DIR` runs this section alone with py-spy attached to the
Engram server during each Engram target, and writes a flame graph (SVG) per target into DIR.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client

from app.auth.devkeys import mint_token
from app.config import Settings
from bench import procs
from bench.env import bench_dir
from bench.generate import Generated
from bench.stats import saturate
from tests.support.client import connect
from tests.support.server import free_port, server_env

ERAS = {"2025-11-25": "legacy", "2026-07-28": "2026-07-28"}
GET_ENTITY = "engram get_entity"
NO_DATABASE = "engram tool without database"
BARE_SDK = "bare MCPServer trivial tool"
BARE_STARLETTE = "bare Starlette JSON handler"
# The Engram tool without database work that the benchmark's server adds (see `serve`).
ECHO_TOOL = "bench_echo"
Call = Callable[[], Awaitable[bool]]


def engram_env(s: Settings, port: int, clients: int) -> dict[str, str]:
    """The benchmark server's environment. All clients share one token and one tenant, so the
    fair-sharing limits that keep one tenant from starving others are raised out of the way (their
    code still runs on every call): the benchmark measures the work of a call, not a limit."""
    unlimited = {f"ENGRAM_{k}": "1000000" for k in ("TENANT_RATE", "TENANT_BURST", "TOKEN_RATE", "TOKEN_BURST")}
    return server_env(s, port, **unlimited, ENGRAM_TENANT_MAX_CONCURRENT=str(max(clients, 4)))


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


@contextmanager
def py_spy(pid: int, svg: Path | None) -> Any:
    """Sample `pid` with py-spy into a flame graph while the block runs (nothing when `svg` is None)."""
    if svg is None:
        yield
        return
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        raise RuntimeError("--profile needs py-spy (in the dev group): make install-dev")
    cmd = [spy, "record", "--pid", str(pid), "--rate", "200", "--format", "flamegraph", "--output", str(svg)]
    process = subprocess.Popen([*cmd, "--nonblocking"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        yield
    finally:
        process.send_signal(2)  # SIGINT: py-spy writes its output and exits
        try:
            _, err = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
        if process.returncode not in (0, -2) or not svg.exists():
            raise RuntimeError(f"py-spy failed ({process.returncode}): {err.decode()[-400:]}")


async def run(
    settings: Settings,
    g: Generated,
    seconds: float,
    warmup: float,
    rounds: int,
    n_clients: int = 16,
    say: Any = print,
    profile: Path | None = None,
) -> dict[str, Any]:
    rng = random.Random(5)
    names = g.sample_names
    engram_port, mcp_port, bare_port = free_port(), free_port(), free_port()
    s = settings.model_copy(update={"port": engram_port, "dev_key_file": bench_dir() / "dev-signing-key.json"})
    database = s.runtime_dsn().rsplit("/", 1)[1].split("?", 1)[0]
    with (
        procs.serve(
            procs.python("-m", "bench.over_http", "serve"), engram_port, engram_env(s, engram_port, n_clients)
        ) as engram,
        procs.serve(procs.python("-m", "bench.floors", "mcp", str(mcp_port)), mcp_port) as bare_mcp,
        procs.serve(procs.python("-m", "bench.floors", "starlette", str(bare_port)), bare_port) as bare,
    ):
        token = mint_token(s, tenant=g.tenant)
        engram_url, mcp_url = f"http://127.0.0.1:{engram_port}/mcp", f"http://127.0.0.1:{mcp_port}/mcp"
        targets = []
        for era, mode in ERAS.items():
            targets += [
                Target(
                    GET_ENTITY,
                    era,
                    engram.pid,
                    lambda mode=mode: mcp_calls(
                        engram_url, token, mode, n_clients, "get_entity", lambda: {"name": rng.choice(names)}
                    ),
                ),
                Target(
                    NO_DATABASE,
                    era,
                    engram.pid,
                    lambda mode=mode: mcp_calls(engram_url, token, mode, n_clients, ECHO_TOOL, lambda: {"text": "hi"}),
                ),
                Target(
                    BARE_SDK,
                    era,
                    bare_mcp.pid,
                    lambda mode=mode: mcp_calls(mcp_url, None, mode, n_clients, "ping", lambda: {"text": "pong"}),
                ),
            ]
        targets.append(
            Target(BARE_STARLETTE, "-", bare.pid, lambda: post_calls(f"http://127.0.0.1:{bare_port}/mcp", n_clients))
        )
        runs: dict[tuple[str, str], list[dict[str, Any]]] = {(t.label, t.era): [] for t in targets}
        for r in range(rounds):
            say(f"  round {r + 1}/{rounds}: {len(targets)} targets x {seconds:g} s, {n_clients} clients each ...")
            for t in targets:
                svg = None
                if profile is not None and t.label.startswith("engram") and r == rounds - 1:
                    svg = profile / f"{t.label.removeprefix('engram ').replace(' ', '-')}-{t.era}.svg"
                async with t.calls() as calls:
                    if warmup:
                        await saturate(calls, warmup, 0)
                    with py_spy(t.pid, svg), procs.CpuWindow(t.pid, database) as cpu:
                        out = await saturate(calls, seconds, 0)
                runs[(t.label, t.era)].append(
                    {**out.as_dict(), "cores": cpu.cores, "cpu_ms_per_call": _per_call(cpu.seconds, out.calls)}
                )
    summary = _summary(runs)
    return {
        "clients": n_clients,
        "seconds": seconds,
        "rounds": rounds,
        "database": database,
        # The targets compared with the bare SDK (docs/benchmarks.md, "Over HTTP"), then the
        # Engram tool without database work, which tells the plumbing's share from the tool's own work.
        "runs": [x for x in summary if x["target"] != NO_DATABASE],
        "engram_without_database": [x for x in summary if x["target"] == NO_DATABASE],
    }


def _per_call(seconds: dict[str, float | None], calls: int) -> dict[str, float | None]:
    """CPU milliseconds per answered call, by process group."""
    return {k: (v * 1000 / calls if v is not None and calls else None) for k, v in seconds.items()}


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
            "cpu_ms_per_call": {
                k: statistics.median(r["cpu_ms_per_call"][k] or 0 for r in rs) for k in ("server", "database")
            },
        }
        if label.startswith("engram"):
            bare = runs[(BARE_SDK, era)]
            row["share_of_bare_sdk"] = statistics.median(
                r["per_second"] / b["per_second"] for r, b in zip(rs, bare, strict=True)
            )
            row["server_cpu_vs_bare_sdk"] = statistics.median(
                (r["cpu_ms_per_call"]["server"] or 0) / b["cpu_ms_per_call"]["server"]
                for r, b in zip(rs, bare, strict=True)
                if b["cpu_ms_per_call"]["server"]
            )
        out.append(row)
    return out


def add_bench_tools() -> None:
    """Register, beside the native tools, the tools the benchmark measures Engram's parts with:

    - `bench_echo`: returns its argument; no database work (the plumbing of every call: token,
      scope check, admission, deadline, error mapping, metrics and log line).
    - `bench_tx`: one read-only tenant transaction with `k` `SELECT 1` (the transaction's own cost).
    - `bench_db_only`: get_entity's service call, answering "ok" (its database work, not its answer).
    - `bench_cached`: get_entity's answer for `name`, read once and then kept (the answer, not the database).

    Each goes through the same ToolSet as every tool."""
    from app.auth.principal import READ, Principal
    from app.mcp.tools import admin
    from app.mcp.toolset import READ_ONLY, ToolSet
    from app.services import Services, models

    register = admin.register

    def with_bench_tools(tool: ToolSet, services: Services) -> None:
        register(tool, services)
        kept: dict[str, models.Entity] = {}

        @tool(READ, READ_ONLY, name=ECHO_TOOL, title="Echo")
        async def echo(who: Principal, text: str = "pong") -> str:
            """Answer at once with `text`."""
            return text

        @tool(READ, READ_ONLY, name="bench_tx", title="Transaction")
        async def tx(who: Principal, k: int = 0) -> str:
            """One read-only transaction in the caller's tenant with `k` SELECT 1."""
            db = services.entities.db
            async with db.transaction(await db.tenant(who.tenant), readonly=True) as t:
                for _ in range(k):
                    await t.fetchval("SELECT 1")
            return "ok"

        @tool(READ, READ_ONLY, name="bench_db_only", title="Database only")
        async def db_only(who: Principal, name: str) -> str:
            """get_entity's database work; a small answer."""
            await services.entities.get(who, name)
            return "ok"

        @tool(READ, READ_ONLY, name="bench_cached", title="Cached")
        async def cached(who: Principal, name: str) -> models.Entity:
            """get_entity's answer, read once and then kept."""
            if name not in kept:
                kept[name] = await services.entities.get(who, name)
            return kept[name]

    admin.register = with_bench_tools  # type: ignore[assignment]


def serve() -> None:
    """`engram serve` with the benchmark's tools (`add_bench_tools`) beside the native ones."""
    from app import cli

    add_bench_tools()
    cli.main(["serve"])


async def breakdown(
    settings: Settings, g: Generated, mode: str, blocks: int = 40, per: int = 20, say: Any = print
) -> dict[str, Any]:
    """Server CPU per call of Engram's parts, without HTTP: the app runs in this process, each
    request is recorded once from a real SDK client (through an in-process ASGI transport) and
    then replayed straight into the ASGI app, so only the server's work is timed (this thread's
    CPU time). The targets take turns in blocks of `per` calls, `blocks` times, so each sees the
    same background load."""
    from app.observability.logging import configure
    from app.server import create_app
    from bench import floors

    configure("WARNING")
    add_bench_tools()
    unlimited = {"tenant_rate": 1e6, "tenant_burst": 10**6, "token_rate": 1e6, "token_burst": 10**6}
    s = settings.model_copy(
        update={"dev_key_file": bench_dir() / "dev-signing-key.json", "metrics_port": 0, **unlimited}
    )
    app, bare = create_app(s), floors.mcp_app()
    token = mint_token(s, tenant=g.tenant)
    base = f"http://127.0.0.1:{s.port}"
    rng = random.Random(9)
    names = [rng.choice(g.sample_names) for _ in range(100)]
    async with app.router.lifespan_context(app), bare.router.lifespan_context(bare):
        targets = {
            BARE_SDK: (bare, await _record(bare, base, None, mode, "ping", [{"text": "pong"}])),
            NO_DATABASE: (app, await _record(app, base, token, mode, ECHO_TOOL, [{"text": "hi"}])),
            "engram, a transaction and nothing else": (
                app,
                await _record(app, base, token, mode, "bench_tx", [{"k": 0}]),
            ),
            "engram, a transaction with 10 SELECT 1": (
                app,
                await _record(app, base, token, mode, "bench_tx", [{"k": 10}]),
            ),
            "engram, get_entity's answer without the database": (
                app,
                await _record(app, base, token, mode, "bench_cached", [{"name": n} for n in names]),
            ),
            "engram, get_entity's database work without its answer": (
                app,
                await _record(app, base, token, mode, "bench_db_only", [{"name": n} for n in names]),
            ),
            GET_ENTITY: (app, await _record(app, base, token, mode, "get_entity", [{"name": n} for n in names])),
        }
        for target, (asgi, requests) in targets.items():  # warm-up, and every answer must be a success
            for request in requests[:20]:
                status, body = await _replay(asgi, *request)
                if status != 200 or b'"isError":true' in body:
                    raise RuntimeError(f"{target}: {status} {body[:300]!r}")
        cpu = dict.fromkeys(targets, 0.0)
        for b in range(blocks):
            for target, (asgi, requests) in targets.items():
                started = time.thread_time()
                for i in range(per):
                    await _replay(asgi, *requests[(b * per + i) % len(requests)])
                cpu[target] += time.thread_time() - started
    ms = {t: cpu[t] * 1000 / (blocks * per) for t in targets}
    say("  " + ", ".join(f"{t}: {v:.3f} ms" for t, v in ms.items()))
    return {"era": next(e for e, m in ERAS.items() if m == mode), "calls": blocks * per, "cpu_ms_per_call": ms}


async def _record(
    app: Any, base: str, token: str | None, mode: str, tool: str, calls: list[dict[str, Any]]
) -> list[Any]:
    """The raw tools/call requests (ASGI scope and body) a real SDK client sends for `calls`."""
    from mcp.client.streamable_http import streamable_http_client

    seen: list[tuple[dict[str, Any], bytes]] = []

    async def recording(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        body, more = b"", True
        while more:
            message = await receive()
            body, more = body + message.get("body", b""), message.get("more_body", False)
        if b'"tools/call"' in body:
            seen.append((dict(scope), body))
        await _replay(app, scope, body, send)

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    transport = httpx2.ASGITransport(recording)  # type: ignore[arg-type]
    async with (
        httpx2.AsyncClient(headers=headers, transport=transport, base_url=base) as http,
        Client(streamable_http_client(f"{base}/mcp", http_client=http), mode=mode) as client,
    ):
        for arguments in calls:
            if (await client.call_tool(tool, arguments)).is_error:
                raise RuntimeError(f"{tool} failed while recording")
    return seen


async def _replay(app: Any, scope: dict[str, Any], body: bytes, send: Any = None) -> tuple[int, bytes]:
    status, out = 0, []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def collect(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            out.append(message.get("body", b""))
        if send is not None:
            await send(message)

    await app(dict(scope), receive, collect)
    return status, b"".join(out)


def main() -> None:
    if sys.argv[1:] == ["serve"]:
        serve()
        return
    parser = argparse.ArgumentParser(prog="python -m bench.over_http", description=__doc__.split("\n")[0])
    parser.add_argument("--profile", type=Path, help="write py-spy flame graphs of the Engram server here")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument(
        "--breakdown", action="store_true", help="CPU per call of Engram's parts, in this process, without HTTP"
    )
    args = parser.parse_args()
    from bench import env, generate, report

    async def measure() -> dict[str, Any]:
        s = env.settings()
        g = await generate.ensure(s, generate.Shape(), keep=True)
        if args.breakdown:
            return {"breakdown": [await breakdown(s, g, mode) for mode in ERAS.values()]}
        if args.profile:
            args.profile.mkdir(parents=True, exist_ok=True)
        http = await run(s, g, args.seconds, 1, args.rounds, args.clients, profile=args.profile)
        return {"http": http}

    result = asyncio.run(measure())
    print(breakdown_table(result["breakdown"]) if args.breakdown else report.http(result))


def breakdown_table(rows: list[dict[str, Any]]) -> str:
    """Markdown: CPU per call of each part, per era, and its share of the bare SDK's."""
    eras = [r["era"] for r in rows]
    lines = [
        "| target | " + " | ".join(f"{e}: ms CPU per call (x bare SDK)" for e in eras) + " |",
        "|---" * (len(eras) + 1) + "|",
    ]
    for target in rows[0]["cpu_ms_per_call"]:
        cells = []
        for r in rows:
            ms, bare = r["cpu_ms_per_call"][target], r["cpu_ms_per_call"][BARE_SDK]
            cells.append(f"{ms:.3f} ({ms / bare:.2f}x)")
        lines.append(f"| {target} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
