"""`python -m bench`: every benchmark in one run; prints a Markdown report and keeps the raw figures.

Sections: the generated graph (reused when present), store-level latency under a background
writer, HTTP throughput against the bare SDK and Starlette, and the reference server-memory.

`--quick` checks that the benchmark itself still runs (not figures): a fresh scratch database
(see `env.scratch_name`), a small graph made anew, a few iterations of every section, and the
reference section only when its npm package is already installed (a quick run downloads nothing).
Either way the exit status is non-zero when a section fails or produces no figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from bench import env, generate, over_http, reference, report, store

SECTIONS = ("store", "http", "reference")
QUICK_GRAPH = (1_500, 6_000)  # entities, relations


async def main(args: argparse.Namespace) -> dict[str, Any]:
    s = env.settings()
    if args.quick:
        name = env.scratch_name()
        print(f"quick run: a fresh scratch database {name!r} ...")
        s = await env.fresh_database(s, name)
    results: dict[str, Any] = {"machine": env.machine(), "versions": await env.database_versions(s)}
    results["machine"]["quick"] = args.quick
    if "store" in args.only or "http" in args.only:
        shape = generate.Shape(entities=args.entities, relations=args.relations)
        started = time.monotonic()
        g = await generate.ensure(s, shape, keep=not args.quick)
        results["graph"] = {**orjson.loads(orjson.dumps(g)), "ready_in_s": round(time.monotonic() - started, 1)}
        del results["graph"]["sample_names"]
    if "store" in args.only:
        print("store-level latency, with a background writer ...")
        rounds = store.Rounds.quick() if args.quick else store.Rounds()
        results["store"] = await _section(store.run(s, g, rounds, args.write_rate))
    if "http" in args.only:
        print("HTTP throughput ...")
        seconds, warmup, rounds = (2, 0.5, 1) if args.quick else (args.seconds, 1, args.rounds)
        results["http"] = await _section(over_http.run(s, g, seconds, warmup, rounds, args.clients))
    if "reference" in args.only:
        print("reference server-memory ...")
        skip = reference.missing(install=not args.quick)
        if skip:
            print(f"  skipped: {skip}")
            results["reference"] = {"skipped": skip}
        else:
            sizes = list(reference.QUICK_SIZES if args.quick else args.reference_sizes)
            results["reference"] = await _section(reference.run(s, sizes, args.tool_rounds))
    results["machine"]["load_average_after"] = os.getloadavg()
    return results


async def _section(work: Any) -> dict[str, Any]:
    """A section's figures, or what went wrong: one failing section does not stop the others."""
    try:
        return await work
    except Exception as exc:
        traceback.print_exc()
        return {"error": f"{type(exc).__name__}: {exc}"}


def problems(r: dict[str, Any], only: list[str], tool_rounds: int) -> list[str]:
    """Why the run's figures are incomplete: sections that failed, or ran without producing figures.

    Nothing here looks at how fast anything was, only at whether each measurement happened.
    """
    found = []
    for section in only:
        got = r.get(section)
        if got is None:
            found.append(f"{section}: did not run")
        elif "error" in got:
            found.append(f"{section}: {got['error']}")
    if "store" in only and "cases" in r.get("store", {}):
        cases = r["store"]["cases"]
        if len(cases) != 8:
            found.append(f"store: {len(cases)} cases measured, 8 expected")
        for c in cases:
            for k in ("service", "floor"):
                if not c.get(k, {}).get("n"):
                    found.append(f"store: {c['name']}: no {k} figures")
            x = c.get("extra") or {}
            if x.get("relations_per_answer_mean") == 0 or x.get("neighbors_mean") == 0:
                found.append(f"store: {c['name']}: every answer was empty")
        w = r["store"]["writer"]
        if not w.get("writes") or w.get("errors") or "error" in w:
            found.append(f"store: the background writer: {w}")
    if "http" in only and "runs" in r.get("http", {}):
        runs = r["http"]["runs"]
        if len(runs) != 5:
            found.append(f"http: {len(runs)} targets measured, 5 expected")
        for x in runs:
            if not x["per_second"] or x["errors"]:
                found.append(f"http: {x['target']} ({x['era']}): {x['per_second']} calls/s, {x['errors']} errors")
    if "reference" in only and "sizes" in r.get("reference", {}):
        for n, row in r["reference"]["sizes"].items():
            for side in (reference.REFERENCE, reference.ENGRAM):
                figures = row.get(side, {})
                for part in ("tools", "tools_analyzed") if side == reference.ENGRAM else ("tools",):
                    # The reference's rounds may stop at its time bound (reported); each tool ran in every round.
                    rounds = (
                        (figures.get("tools_bounded") or {}).get("rounds", tool_rounds) if part == "tools" else None
                    )
                    want = tool_rounds if rounds is None else rounds
                    done = {t for t, lat in figures.get(part, {}).items() if lat.get("n") == want and want > 0}
                    if done != set(reference.TOOLS):
                        found.append(f"reference {n}: {side}: {part} lacks {sorted(set(reference.TOOLS) - done)}")
    return found


def cli() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small graph in a scratch database, few iterations")
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated sections of {SECTIONS}")
    parser.add_argument("--entities", type=int, help="entities in the graph (default 100,000; quick 1,500)")
    parser.add_argument("--relations", type=int, help="relations in the graph (default 500,000; quick 6,000)")
    parser.add_argument("--write-rate", type=float, default=20.0, help="background writes per second")
    parser.add_argument("--clients", type=int, help="concurrent MCP clients over HTTP (default 16; quick 4)")
    parser.add_argument("--seconds", type=float, default=5.0, help="timed seconds per HTTP target and round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of HTTP targets, taken in turn")
    parser.add_argument("--tool-rounds", type=int, help="calls per tool against the reference (default 20; quick 3)")
    parser.add_argument(
        "--reference-sizes",
        type=lambda v: [int(x) for x in v.split(",")],
        default=list(reference.SIZES),
        help="entity counts of the reference comparison (default 1000,10000,100000; quick 200)",
    )
    parser.add_argument("--results", type=Path, help="where to keep the raw figures (JSON)")
    args = parser.parse_args()
    args.only = [x.strip() for x in args.only.split(",") if x.strip()]
    unknown = set(args.only) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections: {', '.join(sorted(unknown))}")
    quick_entities, quick_relations = QUICK_GRAPH
    defaults = {"entities": (quick_entities, 100_000), "relations": (quick_relations, 500_000)}
    defaults |= {"clients": (4, 16), "tool_rounds": (3, 20)}
    for key, (quick, full) in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, quick if args.quick else full)
    started = time.monotonic()
    results = asyncio.run(main(args))
    results["seconds"] = round(time.monotonic() - started, 1)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = args.results or env.bench_dir() / ("results-quick.json" if args.quick else f"results-{stamp}.json")
    path.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    print()
    print(report.render(results))
    print(f"\nraw figures: {path}")
    wrong = problems(results, args.only, args.tool_rounds)
    for line in wrong:
        print(f"FAILED {line}", file=sys.stderr)
    print(f"{'quick run' if args.quick else 'run'} took {results['seconds']:.0f} s")
    if wrong:
        sys.exit(1)


if __name__ == "__main__":
    cli()
