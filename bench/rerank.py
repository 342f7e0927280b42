"""`python -m bench.rerank`: what the cross-encoder reranker (ENGRAM_RERANK_MODEL) costs `recall`.

`recall` at limit 10 over HTTP, p50/p95, on the tenants of the development set's first
conversation that a `bench.recall` run left in its database (its facts; its turns as episodes),
asked each of that conversation's questions once: a server without a reranker, then one with it at
each depth, its time budget (ENGRAM_RERANK_BUDGET_MS) as configured; with how many of those
recalls it skipped, and why.

    scripts/candidate-models.py ms-marco-minilm-l12-int8
    python -m bench.recall --quick        # the data (its scratch database)
    python -m bench.rerank [--depths 10 20] [--questions 80] [--database NAME] [--results FILE]
    python -m bench.rerank --quick        # depth 10, five questions (`make test`; fetches the model)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import asyncpg
import orjson

from app.store import migrate
from bench import env
from bench.recall import DATA, locomo
from bench.stats import Latency
from tests.support.client import ok
from tests.support.server import serve

RERANKER = env.ROOT / ".models" / "ms-marco-minilm-l12-int8"


async def measure(s: Any, tenants: list[str], questions: list[str], **extra: str) -> dict[str, Any]:
    """Each question's recall in each tenant, timed, on a server with `extra` settings; the notices
    that said the reranking was skipped."""
    out = {}
    with serve(s, **extra) as server:
        for tenant in tenants:
            samples, skipped = [], Counter[str]()
            async with server.client(tenant) as c:
                ok(await c.call_tool("recall", {"query": "warm up", "limit": 10}))
                for q in questions:
                    started = time.perf_counter_ns()
                    found = ok(await c.call_tool("recall", {"query": q, "limit": 10}))
                    samples.append(time.perf_counter_ns() - started)
                    skipped.update(n.split(";")[0] for n in found["notices"] if n.startswith("reranking skipped"))
            out[tenant] = {"latency": Latency.of(samples).as_dict(), "skipped": dict(skipped)}
    return out


def quick(args: argparse.Namespace) -> None:
    """Depth 10 and five questions, the reranker's files fetched, and the data made by a quick recall
    run when none ran before this one (what it prints goes to stderr: stdout is the results)."""
    args.depths, args.questions = [10], 5
    if not DATA.exists():
        return  # nothing to measure on (main says so): no model fetched for it
    fetch = [sys.executable, str(env.ROOT / "scripts/candidate-models.py"), RERANKER.name]
    subprocess.run(fetch, check=True, cwd=env.ROOT, stdout=sys.stderr)
    if not asyncio.run(_exists(env.on_database(env.settings(), env.scratch_name("recall")))):
        subprocess.run([sys.executable, "-m", "bench.recall", "--quick"], check=True, cwd=env.ROOT, stdout=sys.stderr)


async def _exists(s: Any) -> bool:
    try:
        conn = await asyncpg.connect(s.admin_dsn())
    except asyncpg.InvalidCatalogNameError:
        return False
    await conn.close()
    return True


async def main(args: argparse.Namespace) -> dict[str, Any]:
    if not DATA.exists():
        return {"machine": {**env.machine(), "quick": args.quick}, "skipped": f"{DATA} is absent"}
    conversation = locomo(DATA)[0]
    s = env.on_database(env.settings(), args.database or env.scratch_name("recall"))
    await migrate.migrate(s.admin_dsn(), s.migrations_dir)  # a recall run's database may be older than the code
    tenants = [f"bench-{conversation.name}-{layout}" for layout in ("facts", "episodes")]
    questions = [q.text for q in conversation.questions][: args.questions]
    runs = {"no reranker": await measure(s, tenants, questions)}
    for depth in args.depths:
        extra = {"ENGRAM_RERANK_MODEL": str(RERANKER), "ENGRAM_RERANK_DEPTH": str(depth)}
        runs[f"reranker over {depth}"] = await measure(s, tenants, questions, **extra)
    budget = os.environ.get("ENGRAM_RERANK_BUDGET_MS", "the default")
    machine = {**env.machine(), "quick": args.quick}
    return {"machine": machine, "budget_ms": budget, "questions": len(questions), "runs": runs}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--depths", type=int, nargs="+", default=[10, 20], help="ENGRAM_RERANK_DEPTH values")
    parser.add_argument("--questions", type=int, default=80, help="questions asked (each once per server)")
    parser.add_argument("--database", help="the bench.recall run's database (default: a quick run's)")
    parser.add_argument("--quick", action="store_true", help="depth 10 and five questions: that it still runs")
    parser.add_argument("--results", type=Path, help="where to write the results as JSON too")
    arguments = parser.parse_args()
    if arguments.quick:
        quick(arguments)
    results = orjson.dumps(asyncio.run(main(arguments)), option=orjson.OPT_INDENT_2)
    if arguments.results:
        arguments.results.write_bytes(results)
    print(results.decode())
