"""`python -m bench.transfer`: export and import of the generated graph through the real CLI.

The generated tenant (bench/generate.py, 100k entities and 500k relations by default) is exported
with `engram export` (engram and memory formats), each file is imported with `engram import` into
a fresh tenant, and the copy is exported again and compared byte for byte with the first file.
Each command runs in its own process; the report gives its wall time, rows per second (entities +
observations + relations) and the process's peak resident memory.

`--quick` checks that it runs: a fresh scratch database (see `env.scratch_name`) and a small graph.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import orjson

from bench import env, generate
from bench.reference import drop_tenant
from tests.support.server import ROOT

QUICK_GRAPH = (1_500, 6_000)


def _cli(s: Any, *args: str) -> dict[str, Any]:
    """One `engram` command in its own process: its wall time and its own peak memory."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.monotonic()
        process = subprocess.Popen(
            [sys.executable, "-m", "app.cli", *args],
            cwd=ROOT,
            env={**env.database_env(s), "ENGRAM_EMBEDDING_PROVIDER": "none"},
            stdout=out,
            stderr=err,
        )
        peak = 0
        status_file = Path(f"/proc/{process.pid}/status")
        while process.poll() is None:  # its own peak (VmHWM starts afresh at exec), read until it ends
            with contextlib.suppress(OSError):
                peak = max(peak, _high_water(status_file.read_text()))
            time.sleep(0.2)
        seconds = time.monotonic() - started
        out.seek(0)
        err.seek(0)
        if process.returncode != 0:
            raise RuntimeError(f"engram {' '.join(args[:2])} failed ({process.returncode}): {err.read()[-2000:]!r}")
        return {"seconds": round(seconds, 2), "peak_rss_mib": round(peak / 1024, 1), "stdout": out.read()}


def _high_water(status: str) -> int:
    """VmHWM of a /proc/PID/status, in KiB (0 once the process is a zombie)."""
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def _rows(path: Path, fmt: str) -> dict[str, int]:
    """Entities, observations and relations in an exported file."""
    out = {"entities": 0, "observations": 0, "relations": 0}
    with path.open("rb") as f:
        for line in f:
            if fmt == "engram" or line.startswith(b'{"type"'):
                r = orjson.loads(line)
                if r["type"] == "entity":
                    out["entities"] += 1
                    out["observations"] += len(r["observations"])
                elif r["type"] == "relation":
                    out["relations"] += 1
    return out


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


async def run(s: Any, g: generate.Generated, work: Path, say: Any = print) -> dict[str, Any]:
    out: dict[str, Any] = {"tenant": g.tenant, "formats": {}}
    for fmt in ("engram", "memory"):
        first = work / f"export.{fmt}.jsonl"
        say(f"  export {fmt} ...")
        exported = _cli(s, "export", "--tenant", g.tenant, "--format", fmt, "-o", str(first))
        rows = _rows(first, fmt)
        total = sum(rows.values())
        copy = f"bench-import-{uuid.uuid4().hex[:8]}"
        say(f"  import {fmt} ({total:,} rows) into {copy} ...")
        try:
            imported = _cli(s, "import", "--tenant", copy, str(first), "--json")
            summary = orjson.loads(imported.pop("stdout"))
            again = work / f"again.{fmt}.jsonl"
            _cli(s, "export", "--tenant", copy, "--format", fmt, "-o", str(again))
            same = _digest(first) == _digest(again)
        finally:
            await drop_tenant(s, copy)
        exported.pop("stdout")
        out["formats"][fmt] = {
            "rows": rows,
            "bytes": first.stat().st_size,
            "export": {**exported, "rows_per_s": round(total / exported["seconds"])},
            "import": {**imported, "rows_per_s": round(total / imported["seconds"])},
            "summary": {k: summary[k] for k in ("entities", "relations", "observations_added", "refused_total")},
            "round_trip_identical": same,
        }
        say(
            f"  {fmt}: export {out['formats'][fmt]['export']['rows_per_s']:,} rows/s, "
            f"import {out['formats'][fmt]['import']['rows_per_s']:,} rows/s, identical: {same}"
        )
    return out


def report(r: dict[str, Any]) -> str:
    m = r["machine"]
    lines = [
        "## Export and import",
        "",
        f"{m['date']}, {m['cpu']}, {m['nproc']} cores, {m['memory_gib']} GiB, load before {m['load_average'][0]:.1f}; "
        f"code {m['code']}; graph: {r['graph']['entities']:,} entities, {r['graph']['relations']:,} relations.",
        "",
        "| format | rows | file | export | rows/s | peak RSS | import | rows/s | peak RSS | same file back |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for fmt, f in r["transfer"]["formats"].items():
        total = sum(f["rows"].values())
        lines.append(
            f"| {fmt} | {total:,} | {f['bytes'] / 1024**2:,.0f} MiB | {f['export']['seconds']} s | "
            f"{f['export']['rows_per_s']:,} | {f['export']['peak_rss_mib']} MiB | {f['import']['seconds']} s | "
            f"{f['import']['rows_per_s']:,} | {f['import']['peak_rss_mib']} MiB | {f['round_trip_identical']} |"
        )
    return "\n".join(lines)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    s = env.settings()
    if args.quick:
        name = env.scratch_name("transfer")
        print(f"quick run: a fresh scratch database {name!r} ...")
        s = await env.fresh_database(s, name)
        entities, relations = QUICK_GRAPH
    else:
        entities, relations = args.entities, args.relations
    g = await generate.ensure(s, generate.Shape(entities=entities, relations=relations), keep=not args.quick)
    work = Path(tempfile.mkdtemp(prefix="transfer-", dir=env.bench_dir()))  # this run's own files
    try:
        return {
            "machine": {**env.machine(), "quick": args.quick},
            "graph": {"entities": entities, "relations": relations},
            "transfer": await run(s, g, work),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a small graph in a scratch database")
    parser.add_argument("--entities", type=int, default=100_000)
    parser.add_argument("--relations", type=int, default=500_000)
    parser.add_argument("--results", type=Path, help="write the raw figures here (JSON)")
    args = parser.parse_args()
    results = asyncio.run(main(args))
    print(report(results))
    if args.results:
        args.results.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    bad = [f for f, x in results["transfer"]["formats"].items() if not x["round_trip_identical"]]
    if bad:
        sys.exit(f"round trip differs: {', '.join(bad)}")


if __name__ == "__main__":
    cli()
