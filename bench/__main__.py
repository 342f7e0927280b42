"""`python -m bench`: every benchmark in one run; prints a Markdown report and keeps the raw figures.

Sections: the generated graph (reused when present), store-level latency under a background
writer, HTTP throughput against the bare SDK and Starlette, and the reference server-memory.
`--quick` runs each with few iterations (a smoke test of the benchmark itself, not figures).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from datetime import UTC, datetime
from typing import Any

import orjson

from bench import env, generate, over_http, reference, report, store

SECTIONS = ("store", "http", "reference")


async def main(args: argparse.Namespace) -> dict[str, Any]:
    s = env.settings()
    results: dict[str, Any] = {"machine": env.machine(), "versions": await env.database_versions(s)}
    results["machine"]["quick"] = args.quick
    shape = generate.Shape(entities=args.entities, relations=args.relations)
    started = time.monotonic()
    g = await generate.ensure(s, shape)
    results["graph"] = {**orjson.loads(orjson.dumps(g)), "ready_in_s": round(time.monotonic() - started, 1)}
    del results["graph"]["sample_names"]
    if "store" in args.only:
        print("store-level latency, with a background writer ...")
        rounds = store.Rounds.quick() if args.quick else store.Rounds()
        results["store"] = await store.run(s, g, rounds, args.write_rate)
    if "http" in args.only:
        print("HTTP throughput ...")
        seconds, rounds = (2, 1) if args.quick else (args.seconds, args.rounds)
        results["http"] = await over_http.run(s, g, seconds, 1, rounds, args.clients)
    if "reference" in args.only:
        print("reference server-memory ...")
        sizes = [200] if args.quick else [1_000, 10_000]
        results["reference"] = await reference.run(s, sizes, 3 if args.quick else args.tool_rounds)
    results["machine"]["load_average_after"] = os.getloadavg()
    return results


def cli() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="few iterations: check that the benchmark runs")
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated sections of {SECTIONS}")
    parser.add_argument("--entities", type=int, default=100_000)
    parser.add_argument("--relations", type=int, default=500_000)
    parser.add_argument("--write-rate", type=float, default=20.0, help="background writes per second")
    parser.add_argument("--clients", type=int, default=16, help="concurrent MCP clients over HTTP")
    parser.add_argument("--seconds", type=float, default=5.0, help="timed seconds per HTTP target and round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of HTTP targets, taken in turn")
    parser.add_argument("--tool-rounds", type=int, default=20, help="calls per tool against the reference")
    args = parser.parse_args()
    args.only = [x.strip() for x in args.only.split(",") if x.strip()]
    unknown = set(args.only) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections: {', '.join(sorted(unknown))}")
    results = asyncio.run(main(args))
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = env.bench_dir() / f"results-{stamp}.json"
    path.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    print()
    print(report.render(results))
    print(f"\nraw figures: {path}")


if __name__ == "__main__":
    cli()
