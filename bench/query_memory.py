"""query_graph's memory, measured: the worst queries we can write, each sent through a real server
over HTTP, while the server's process and its database backends are watched from /proc.

Each query's figure is the peak growth of the server's resident memory over its level before the
query, and the peak growth of the anonymous (private) memory of the backend that ran it over that
backend's level before; both sampled every few milliseconds. The bounds they are held to are in
docs/security.md ("query_graph"); the figures go in docs/benchmarks.md.

    python -m bench.query_memory [--quick] [--results FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import orjson

from app.auth.devkeys import mint_token
from app.auth.principal import READ, WRITE
from bench import procs
from bench.env import bench_dir, fresh_database, machine, scratch_name, settings
from tests.support.client import connect
from tests.support.server import free_port, server_env

MAX_BYTES = 1024 * 1024  # ENGRAM_QUERY_GRAPH_MAX_BYTES, its default


def _numbers(n: int) -> str:
    return "[" + ", ".join(str(i) for i in range(n)) + "]"


def _doubled(start: int, times: int) -> str:
    """A string of `start` x's, doubled `times` times in WITH clauses (bound to `s`)."""
    return f"WITH '{'x' * start}' AS s " + "WITH s + s AS s " * times


# Just under the value bound (128 KiB): 1,000 x's doubled seven times are 128,000.
NEAR_BOUND = _doubled(1000, 7)
QUERIES: dict[str, str] = {
    "collect over a 100,000-row product": (
        f"WITH '{'x' * 2700}' AS s UNWIND {_numbers(100)} AS a UNWIND {_numbers(100)} AS b"
        f" UNWIND {_numbers(10)} AS c RETURN size(collect(s))"
    ),
    "s+s+s+s five times, 40 rows": (
        f"WITH '{'x' * 3600}' AS s " + "WITH s + s + s + s AS s " * 5 + f"UNWIND {_numbers(40)} AS r RETURN r, s"
    ),
    "200 rows of 128 KB (the answer cut at the byte bound)": (
        NEAR_BOUND + f"UNWIND {_numbers(200)} AS r RETURN s + toString(r) AS v"
    ),
    "200 rows of 4 lists of 500 floats (many small values)": (
        "WITH [" + ", ".join(["0.5"] * 500) + f"] AS l UNWIND {_numbers(200)} AS r"
        " RETURN l AS a, l AS b, l AS c, l AS d"
    ),
    "64 columns near the value bound, 200 rows": (
        NEAR_BOUND + f"UNWIND {_numbers(200)} AS r RETURN " + ", ".join(f"s + toString(r) AS c{i}" for i in range(64))
    ),
    "collect near the bound in 10,000 groups": (
        NEAR_BOUND + f"UNWIND {_numbers(100)} AS a UNWIND {_numbers(100)} AS b RETURN a * 100 + b AS k, collect(s) AS l"
    ),
    "sort of 10,000 rows near the bound": (
        NEAR_BOUND + f"UNWIND {_numbers(100)} AS a UNWIND {_numbers(100)} AS b"
        " RETURN s + toString(a * 100 + b) AS v ORDER BY v DESC LIMIT 3"
    ),
    "full sort of 10,000 rows by keys near their bound (500 B)": (
        f"WITH '{'x' * 490}' AS s UNWIND {_numbers(100)} AS a UNWIND {_numbers(100)} AS b"
        " WITH s + toString(a * 100 + b) AS v ORDER BY v DESC RETURN count(v)"
    ),
    "top 3 of 10,000 rows by keys near their bound (500 B)": (
        f"WITH '{'x' * 490}' AS s UNWIND {_numbers(100)} AS a UNWIND {_numbers(100)} AS b"
        " RETURN s + toString(a * 100 + b) AS v ORDER BY v DESC LIMIT 3"
    ),
    "count(DISTINCT) of 10,000 keys near their bound (500 B)": (
        f"WITH '{'x' * 490}' AS s UNWIND {_numbers(100)} AS a UNWIND {_numbers(100)} AS b"
        " RETURN count(DISTINCT s + toString(a * 100 + b))"
    ),
    "distinct over 10,000 rows near the bound": (
        NEAR_BOUND + f"UNWIND {_numbers(100)} AS a UNWIND {_numbers(100)} AS b"
        " RETURN DISTINCT size(s + toString(a * 100 + b)) AS v"
    ),
    "a list of 16 values near the bound": NEAR_BOUND + "RETURN size([" + ", ".join(["s"] * 16) + "])",
    "replace every x by the string": NEAR_BOUND + "RETURN size(replace(s, 'x', s))",
    "split into single characters": NEAR_BOUND + "RETURN size(split(s, ''))",
    "49 conditions near the bound, 50 rows": (
        NEAR_BOUND
        + f"UNWIND {_numbers(50)} AS r WITH s, r WHERE "
        + " AND ".join(f"s + toString(r + {i}) <> s" for i in range(49))
        + " RETURN count(r)"
    ),
}


NEAR_LIMIT = "WITH '" + "x" * 100 + "' AS s " + "WITH s + s AS s " * 10  # 102,400 characters, 10 operations
THOUSANDS = f"UNWIND {_numbers(100)} AS a UNWIND {_numbers(20)} AS b"


def _chain(prefix: str, unit: str, operations: int, sep: str, suffix: str) -> str:
    """`prefix` then `unit` joined by `sep` as often as 236 operations allow (with `sep` one of them)."""
    return prefix + sep.join([unit] * (236 // operations)) + suffix


# The reported query (the planner copied each WITH value into each of its 240 uses: +1,051 MiB) and
# its variants, within the parser's bounds (tests/test_query_graph_bounds.py holds each backend to
# its bound under them); each may answer, be refused or reach its time bound: memory is measured.
ATTACKS = {
    "reported: WITH s+s ten times, then s = t 120 times": (
        NEAR_LIMIT + "WITH s, s AS t WHERE " + " AND ".join(["s = t"] * 120) + " RETURN size(s)"
    ),
    "twelve WITH levels": (
        "WITH '"
        + "x" * 25
        + "' AS s "
        + "WITH s + s AS s " * 12
        + "WITH s, s AS t WHERE "
        + " AND ".join(["s = t"] * 115)
        + " RETURN size(s)"
    ),
    "a WITH chain without growth (substring)": (
        f"WITH '{'x' * 1500}' AS s "
        + "WITH s + s + s + s AS s " * 3
        + "WITH substring(s, 0, size(s)) AS s " * 10
        + "WITH s WHERE "
        + " AND ".join(["s = s"] * 100)
        + " RETURN size(s)"
    ),
    "uses in RETURN (236 operations)": _chain(NEAR_LIMIT + "RETURN ", "size(left(s, 999999))", 3, " + ", " AS n"),
    "uses in ORDER BY": _chain(
        NEAR_LIMIT + "UNWIND [1, 2, 3] AS r RETURN r ORDER BY ", "size(toUpper(s))", 3, " + ", ""
    ),
    "CONTAINS 118 times": _chain(NEAR_LIMIT + "WITH s WHERE ", "s CONTAINS s", 2, " AND ", " RETURN 1"),
    "CASE of 200 WHENs": NEAR_LIMIT + "RETURN CASE " + " ".join(["WHEN s<s THEN 1"] * 200) + " END",
    "lists and maps built": (
        NEAR_LIMIT
        + "WITH [s] AS l, {k: s} AS m WITH l, m WHERE "
        + " AND ".join(["l = l AND m = m"] * 55)
        + " RETURN size(l)"
    ),
    "collect": NEAR_LIMIT
    + "UNWIND [1] AS r WITH collect(s) AS l WITH l WHERE "
    + " AND ".join(["l = l"] * 110)
    + " RETURN size(l)",
    "WITH DISTINCT of 2,000 values near the bound": (
        NEAR_LIMIT + THOUSANDS + " WITH DISTINCT s + toString(a * 100 + b) AS v RETURN count(v)"
    ),
    "grouped by 2,000 values near the bound": (
        NEAR_LIMIT + THOUSANDS + " WITH s + toString(a * 100 + b) AS v, count(*) AS c RETURN count(v)"
    ),
    "collect in 10,000 groups (hashed)": (
        NEAR_BOUND + f"UNWIND {_numbers(100)} AS a UNWIND {_numbers(100)} AS b RETURN a * 100 + b AS k, collect(s) AS l"
    ),
    "a full sort of 10,000 keys of 500 bytes": (
        f"WITH '{'x' * 490}' AS s UNWIND {_numbers(100)} AS a UNWIND {_numbers(100)} AS b"
        " WITH s + toString(a * 100 + b) AS v ORDER BY v DESC RETURN count(v)"
    ),
}


QUERIES.update({name: text for name, text in ATTACKS.items() if text not in QUERIES.values()})
QUERIES["257 operations (refused by the parser)"] = NEAR_LIMIT + "RETURN " + " AND ".join(["s = s"] * 124)


def _status(pid: int, field: str) -> int:
    """A /proc/PID/status field in bytes (0 once the process is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class Watch:
    """Samples the server's RSS and each of its backends' anonymous memory until stopped."""

    def __init__(self, server: int, database: str) -> None:
        self.server = server
        self.database = database
        self.backends = procs.database_backends(database, server)
        self.server_before = _status(server, "VmRSS")
        self.before = {pid: _status(pid, "RssAnon") for pid in self.backends}
        self.server_peak = self.server_before
        self.peak = dict(self.before)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.server_peak = max(self.server_peak, _status(self.server, "VmRSS"))
            for pid in self.backends:
                self.peak[pid] = max(self.peak[pid], _status(pid, "RssAnon"))
            time.sleep(0.002)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def figures(self) -> dict[str, float]:
        backend = max((self.peak[p] - self.before[p] for p in self.backends), default=0)
        return {
            "server_growth_mib": round((self.server_peak - self.server_before) / 2**20, 1),
            "backend_growth_mib": round(backend / 2**20, 1),
        }


async def measure(quick: bool) -> dict[str, Any]:
    s = await fresh_database(settings(), scratch_name("query_memory"))
    port = free_port()
    env = server_env(s, port, ENGRAM_EMBEDDING_PROVIDER="none", ENGRAM_QUERY_GRAPH_MAX_BYTES=str(MAX_BYTES))
    database = s.admin_dsn().rsplit("/", 1)[1]
    token = mint_token(s.model_copy(update={"port": port}), tenant="bench-query-memory", scopes=(READ, WRITE))
    out: dict[str, Any] = {"max_bytes": MAX_BYTES, "queries": {}}
    with procs.serve(procs.python("-m", "app.cli", "serve"), port, env) as server:
        async with connect(f"http://127.0.0.1:{port}/mcp", token) as c:
            await c.call_tool("upsert_entities", {"entities": [{"name": "Ada", "type": "person"}]})
            for _ in range(3):  # the server's and the backend's caches warm
                await c.call_tool("query_graph", {"query": "MATCH (n:Entity) RETURN n LIMIT 5"})
            for name, query in list(QUERIES.items())[: 3 if quick else None]:
                with Watch(server.pid, database) as watch:
                    started = time.perf_counter()
                    result = await c.call_tool("query_graph", {"query": query})
                    seconds = time.perf_counter() - started
                answer = result.content[0].text if result.content else ""  # type: ignore[union-attr]
                out["queries"][name] = {
                    **watch.figures(),
                    "seconds": round(seconds, 3),
                    "answer": answer.split("query_graph: ", 1)[-1].split(" {", 1)[0][:110]
                    if result.is_error
                    else f"{len(answer)} characters",
                    "error": result.is_error,
                }
    return out


def report(r: dict[str, Any]) -> str:
    lines = [
        f"## query_graph memory (ENGRAM_QUERY_GRAPH_MAX_BYTES = {r['max_bytes']})",
        "",
        "| query | server RSS growth (MiB) | backend growth (MiB) | s | answer |",
        "|---|---:|---:|---:|---|",
    ]
    for name, q in r["queries"].items():
        lines.append(
            f"| {name} | {q['server_growth_mib']} | {q['backend_growth_mib']} | {q['seconds']} | {q['answer']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the first three queries only")
    parser.add_argument("--results", type=Path, default=bench_dir() / "query_memory.json")
    args = parser.parse_args()
    r = {"machine": {**machine(), "quick": args.quick}, "query_memory": asyncio.run(measure(args.quick))}
    args.results.write_bytes(orjson.dumps(r, option=orjson.OPT_INDENT_2))
    print(report(r["query_memory"]))


if __name__ == "__main__":
    main()
