"""Vectors to PostgreSQL as text literals (what the store sends) against the `pgvector` package's
binary codec for asyncpg, on the write path and the search path. Figures for docs/benchmarks.md
("Vectors on the wire").

    python -m bench.vector_codec [--rounds N]

In a scratch database of its own: a table of 2,000 rows of 384 floats (real vectors: the local
model's, of the texts of tests/data/relevance.json), then, alternating the two ways each round:

- write: 64 vectors set by one UPDATE over unnest() (as the filler stores a batch): text literals
  cast on the server (`$3::text[]`, then `::vector`), or `vector[]` sent in pgvector's binary form;
- search: the nearest 10 of the table to one vector (`$1::text::vector(384)`, as rankings.py
  sends it, or `$1::vector(384)` binary), by an exact scan, planned for each query's values as the
  server's searches are;
- the codec alone: `SELECT $1::...vector(384) IS NOT NULL`, so the query's own work is nothing.

Each is timed as the server would see it (the Python list of floats in, the answer out), with the
client's CPU time beside the wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from app.embeddings.local import LocalModel
from bench import env
from bench.embeddings import corpus

ROWS = 2_000
BATCH = 64


def vector_literal(vector: list[float]) -> str:
    """pgvector's text form: how vectors travelled before the binary codec (the comparison's floor)."""
    return "[" + ",".join(map(str, vector)) + "]"


async def _vectors() -> list[list[float]]:
    model = LocalModel()
    await model.start()
    try:
        texts, queries = corpus()
        found = await model.embed(texts + queries)
    finally:
        await model.close()
    return [found[i % len(found)] for i in range(ROWS)]


async def _timed(work: Callable[[], Awaitable[Any]], times: int) -> tuple[float, float]:
    """Median wall and CPU milliseconds of `work`."""
    wall, cpu = [], []
    for _ in range(times):
        w, c = time.perf_counter(), time.process_time()
        await work()
        wall.append(time.perf_counter() - w)
        cpu.append(time.process_time() - c)
    return statistics.median(wall) * 1000, statistics.median(cpu) * 1000


async def run(rounds: int) -> None:
    from pgvector import Vector
    from pgvector.asyncpg import register_vector

    s = await env.fresh_database(env.settings(), env.scratch_name("codec"))
    vectors = await _vectors()
    text, binary = await asyncpg.connect(s.admin_dsn()), await asyncpg.connect(s.admin_dsn())
    schema = await text.fetchval(
        "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE extname = 'vector'"
    )
    for conn in (text, binary):
        # As searches run in the server (rankings.py): planned for each query's values, so that a
        # text literal's cast is done once, not for every row of a generic plan.
        await conn.execute(f"SET search_path = public, {schema}; SET plan_cache_mode = force_custom_plan")
    await register_vector(binary, schema=schema)
    await text.execute(
        "DROP TABLE IF EXISTS codec_bench; CREATE TABLE codec_bench (id bigint PRIMARY KEY, e vector(384))"
    )
    await binary.copy_records_to_table("codec_bench", records=list(enumerate(vectors)))
    ids = list(range(BATCH))
    batch = vectors[:BATCH]
    query = vectors[ROWS // 2]
    update = "UPDATE codec_bench t SET e = u.e{cast} FROM unnest($1::bigint[], $2::{kind}[]) u(id, e) WHERE t.id = u.id"
    # Without a codec: every vector in one flat float4 array, each row's slice cast on the server.
    flat_update = (
        "UPDATE codec_bench t SET e = ($2::real[])[(u.n - 1) * 384 + 1 : u.n * 384]::vector"
        " FROM unnest($1::bigint[]) WITH ORDINALITY u(id, n) WHERE t.id = u.id"
    )
    cases: dict[str, dict[str, Callable[[], Awaitable[Any]]]] = {
        f"write {BATCH} vectors": {
            "text": lambda: text.execute(
                update.format(cast="::vector", kind="text"), ids, [vector_literal(v) for v in batch]
            ),
            # Vector objects: asyncpg would take a list of lists for a two-dimensional array.
            "binary": lambda: binary.execute(update.format(cast="", kind="vector"), ids, [Vector(v) for v in batch]),
            "float4[]": lambda: text.execute(flat_update, ids, [x for v in batch for x in v]),
        },
        "search: nearest 10 of 2,000": {
            "text": lambda: text.fetch(
                "SELECT id FROM codec_bench ORDER BY e <=> $1::text::vector(384) LIMIT 10", vector_literal(query)
            ),
            "binary": lambda: binary.fetch("SELECT id FROM codec_bench ORDER BY e <=> $1::vector(384) LIMIT 10", query),
            "float4[]": lambda: text.fetch(
                "SELECT id FROM codec_bench ORDER BY e <=> $1::real[]::vector(384) LIMIT 10", query
            ),
        },
        "one vector, nothing else": {
            "text": lambda: text.fetchval("SELECT $1::text::vector(384) IS NOT NULL", vector_literal(query)),
            "binary": lambda: binary.fetchval("SELECT $1::vector(384) IS NOT NULL", query),
            "float4[]": lambda: text.fetchval("SELECT $1::real[]::vector(384) IS NOT NULL", query),
        },
    }
    names = ["text", "binary", "float4[]"]
    results: dict[str, dict[str, list[tuple[float, float]]]] = {c: {n: [] for n in names} for c in cases}
    for r in range(rounds):
        for case, ways in cases.items():
            for way in names[r % 3 :] + names[: r % 3]:
                await ways[way]()  # warm: prepared statement cached
                results[case][way].append(await _timed(ways[way], 50))
    for conn in (text, binary):
        await conn.close()
    print(f"{rounds} rounds of 50 each way, in a rotating order; medians of the rounds' medians\n")
    print("| case | text literals: wall ms (client CPU ms) | pgvector binary codec | float4[] (asyncpg's own binary) |")
    print("|---|---:|---:|---:|")
    for case, ways in results.items():
        cells = []
        for way in names:
            wall, cpu = (statistics.median(x) for x in zip(*ways[way], strict=True))
            cells.append(f"{wall:.2f} ({cpu:.2f})")
        print(f"| {case} | {' | '.join(cells)} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    asyncio.run(run(parser.parse_args().rounds))


if __name__ == "__main__":
    main()
