"""How fast `engram serve` gets ready and how much memory it holds idle, per embedding provider,
and how fast the CLI answers. Figures for docs/benchmarks.md ("Start-up").

    python -m bench.start [--rounds N]

Each round starts `engram serve` once per provider, in a rotating order, against a scratch
database of its own (migrated, empty): the `local` provider (ONNX Runtime, the default), the
`sentence-transformers` provider (torch; when the `torch` extra is installed) and `none`. "Ready" is
the time from launching the process to the first 200 from /readyz, polled every 20 ms, beside the
CPU time the server had spent by then (on a shared machine the wall time stretches, the CPU time
far less); "idle RSS" is the server's resident memory 2 s after that, with nothing asked of it. Then `engram --help` and
`engram --version`, each run `--rounds` x 4 times.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx2

from bench import env
from bench.procs import cpu_seconds
from tests.support.server import free_port

PROVIDERS = ["local", "sentence-transformers", "none"]


def ready_and_rss(environ: dict[str, str]) -> tuple[float, float, float]:
    """Seconds from launch to /readyz 200, the CPU seconds the server spent by then (what an idle
    machine would take, near enough: a shared one stretches the wall time), and resident MB 2 s after."""
    port = free_port()
    environ = {**environ, "ENGRAM_PORT": str(port), "ENGRAM_METRICS_PORT": str(free_port())}
    began = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "app.cli", "serve"], env=environ, stderr=subprocess.DEVNULL)
    try:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"engram serve exited with {process.returncode}")
            try:
                if httpx2.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                    break
            except httpx2.TransportError:
                pass
            if time.perf_counter() - began > 120:
                raise RuntimeError("engram serve was not ready within 120 s")
            time.sleep(0.02)
        ready, cpu = time.perf_counter() - began, cpu_seconds(process.pid)
        time.sleep(2)
        status = Path(f"/proc/{process.pid}/status").read_text()
        return ready, cpu, int(re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)[1]) / 1024
    finally:
        process.terminate()
        process.wait(timeout=30)


def cli_seconds(args: list[str], times: int) -> float:
    """The median wall time of the installed `engram` command with `args`."""
    engram = str(Path(sys.executable).parent / "engram")
    seconds = []
    for _ in range(times):
        began = time.perf_counter()
        subprocess.run([engram, *args], capture_output=True, check=True)
        seconds.append(time.perf_counter() - began)
    return statistics.median(seconds)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    s = asyncio.run(env.fresh_database(env.settings(), env.scratch_name("start")))
    base = {**env.database_env(s), "ENGRAM_LOG_LEVEL": "WARNING", "HF_HUB_OFFLINE": "1"}
    providers = [
        p for p in PROVIDERS if p != "sentence-transformers" or importlib.util.find_spec("sentence_transformers")
    ]
    figures: dict[str, list[tuple[float, float, float]]] = {p: [] for p in providers}
    print(f"load average at start: {os.getloadavg()[0]:.2f}", file=sys.stderr)
    for r in range(args.rounds):
        for p in providers[r % len(providers) :] + providers[: r % len(providers)]:
            figures[p].append(ready_and_rss({**base, "ENGRAM_EMBEDDING_PROVIDER": p}))
    print(f"{args.rounds} rounds; load average at the end {os.getloadavg()[0]:.2f}\n")
    print("| embedding provider | ready (/readyz 200) s: median (min-max) | CPU s by then: median | idle RSS MB |")
    print("|---|---:|---:|---:|")
    for p, runs in figures.items():
        ready, cpu, rss = zip(*runs, strict=True)
        print(
            f"| {p} | {statistics.median(ready):.2f} ({min(ready):.2f}-{max(ready):.2f}) "
            f"| {statistics.median(cpu):.2f} | {statistics.median(rss):.0f} |"
        )
    times = args.rounds * 4
    print(f"\n`engram --help`: {cli_seconds(['--help'], times):.3f} s; ", end="")
    print(f"`engram --version`: {cli_seconds(['--version'], times):.3f} s (medians of {times})")


if __name__ == "__main__":
    main()
