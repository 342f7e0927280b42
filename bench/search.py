"""Search at scale: a tenant with 100k entities (~300k indexed texts) beside a tenant with 1k.

    make bench-search            # or: python -m bench.search [--large N] [--small N] [--reuse]
    python -m bench.search --quick   # a few hundred entities in a scratch database: checks it runs

What is real and what is not (docs/benchmarks.md says the same):
- Every write goes through the service's write path (Entities.upsert: AGE vertex, entity
  rows, observations, search documents) into a database of its own (`engram_bench_search`).
- Embeddings: the small tenant, the first `--real` entities of the large one, the pending-ingestion
  sample and every query are embedded by the local model. The rest of the large tenant gets
  SYNTHETIC vectors: each is a random mixture of three real embeddings from that first part plus
  a little Gaussian noise, so the bulk lies where real text does. Embedding 300k texts on
  this machine's two shared cores would take ~30 min; the query embedding is measured for real.
- Recall of the vector ranking is measured against exact search over the same rows.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import platform
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import asyncpg
import numpy as np
from pydantic import SecretStr

from app.auth.principal import Principal
from app.config import Settings
from app.devdb import provision
from app.services.base import Limits
from app.services.cursors import Cursors
from app.services.entities import Entities
from app.services.indexing import Indexer
from app.services.models import EntityIn
from app.services.ranking import CommonWords, Pager
from app.services.recall import Recall, RecallQuery
from app.services.search import Query, Search
from app.store import index, migrate, rankings
from app.store.database import Database, Tenant
from app.store.scopes import Scope
from bench import corpus, env

BENCH_DB = "engram_bench_search"
BATCH = 200
NOISE = 0.01  # per-dimension sigma of the noise added to each synthetic vector


def who(tenant: str) -> Principal:
    return Principal("bench", "bench", tenant, frozenset(), "bench")


def entity_inputs(items: Sequence[corpus.Entity]) -> list[EntityIn]:
    return [
        EntityIn(name=e.name, type=e.type, description=e.description, observations=list(e.observations)) for e in items
    ]


class SyntheticIndexer(Indexer):
    """Vectors for the bulk of the large tenant: a random mixture of three real embeddings (picked
    by the text's hash) plus a little noise. Noisy copies of single embeddings were tried first:
    they make hundreds of near-ties around every query, for which exact top-10 is itself noise
    (recall 0.46 against it), a distribution no real text collection has."""

    def __init__(self, db: Database, model: index.Model, centres: np.ndarray) -> None:
        super().__init__(db, None, batch_size=64)
        self.model = model
        self._centres = centres

    async def vectors_for(self, tenant: Tenant, texts: Sequence[str]) -> index.Vectors:
        out = {}
        for text in texts:
            digest = index.text_hash(text)
            rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
            parts = self._centres[rng.integers(0, len(self._centres), 3)]
            v = rng.dirichlet((1.0, 1.0, 1.0)) @ parts + rng.normal(0, NOISE, 384)
            out[digest] = (v / np.linalg.norm(v)).tolist()
        return index.Vectors(self.model, out)


async def ingest(memory: Entities, tenant: str, items: Sequence[corpus.Entity]) -> tuple[float, int]:
    """Upsert in batches through the service; returns (seconds, texts left pending)."""
    start, pending = time.perf_counter(), 0
    for i in range(0, len(items), BATCH):
        result = await memory.upsert(who(tenant), entity_inputs(items[i : i + BATCH]), "merge")
        pending += result.embeddings_pending
    return time.perf_counter() - start, pending


def pct(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.array(values), q))


async def timed(fn: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = await fn()
    return (time.perf_counter() - start) * 1000, result


async def bench_db(settings: Settings, name: str, reuse: bool) -> Settings:
    """`settings` pointed at the benchmark's own database: made anew, or with `reuse` kept as loaded."""
    if not reuse:
        return await env.fresh_database(settings, name)
    app_url, owner_url = (url.rsplit("/", 1)[0] + "/" + name for url in (settings.runtime_dsn(), settings.admin_dsn()))
    await migrate.migrate(owner_url, settings.migrations_dir)
    return settings.model_copy(update={"database_url": SecretStr(app_url), "admin_database_url": SecretStr(owner_url)})


async def self_hits(conn: asyncpg.Connection, table: str, expr: str, where: str, sample: int = 50) -> float:
    """Share of sampled rows whose own vector finds them first through the HNSW index: a cheap
    check that an index build did not go wrong (one here once answered 0 of 30)."""
    ids = [r[0] for r in await conn.fetch(f"SELECT id FROM {table} WHERE {where} ORDER BY random() LIMIT {sample}")]
    hits = 0
    for doc in ids:
        async with conn.transaction():
            await conn.execute("SET LOCAL hnsw.ef_search = 100")
            found = await conn.fetchval(
                f"SELECT id FROM {table} WHERE {where} ORDER BY {expr} <=>"
                f" (SELECT {expr} FROM {table} WHERE id = $1) LIMIT 1",
                doc,
            )
        hits += found == doc
    return hits / max(len(ids), 1)


async def vector_recall(
    db: Database, owner_url: str, search_ef: int, model: index.Model, tenant: Tenant, vectors: Sequence[Sequence[float]]
) -> dict[str, float]:
    """The production vector query (top 50 texts, first 10 kept) against an exact scan of the same
    rows, run on a connection of its own so no cached plan is shared between the two."""
    exact_conn = await asyncpg.connect(owner_url, server_settings={"search_path": "ag_catalog, public"})
    ann_ms, exact_ms, recalls = [], [], []
    try:
        await exact_conn.execute("SET enable_indexscan = off")
        for v in vectors:
            async with db.transaction(tenant, readonly=True) as tx:
                await rankings.tune(tx, max(search_ef, 50))
                ms, ann = await timed(lambda v=v, tx=tx: rankings.by_vector(tx, model, v, 50, Scope(), "entity texts"))
            ann_ms.append(ms)
            literal = "[" + ",".join(map(str, v)) + "]"
            ms, exact = await timed(
                lambda literal=literal: exact_conn.fetch(
                    f"SELECT id FROM {tenant.schema}.search_docs WHERE model_id = $2"
                    " ORDER BY embedding::vector(384) <=> $1::text::vector(384) LIMIT 10",
                    literal,
                    model.id,
                )
            )
            exact_ms.append(ms)
            truth = {r[0] for r in exact}
            recalls.append(len(truth & {r.doc_id for r in ann[:10]}) / max(len(truth), 1))
    finally:
        await exact_conn.close()
    return {
        "recall@10": statistics.mean(recalls),
        "recall@10 min": min(recalls),
        "ann p50 ms": pct(ann_ms, 50),
        "exact p50 ms": pct(exact_ms, 50),
    }


async def shared_table(
    owner_url: str, tenants: dict[str, Tenant], vectors: Sequence[Sequence[float]]
) -> dict[str, Any]:
    """The design not taken: both tenants in one table with one HNSW index, filtered by tenant."""
    conn = await asyncpg.connect(owner_url, server_settings={"search_path": "ag_catalog, public"})
    out: dict[str, Any] = {}
    try:
        await conn.execute("DROP TABLE IF EXISTS bench_shared")
        await conn.execute(
            "CREATE TABLE bench_shared (id bigint GENERATED ALWAYS AS IDENTITY, tenant text, doc_id bigint,"
            " embedding vector(384))"
        )
        for key, t in tenants.items():
            await conn.execute(
                f"INSERT INTO bench_shared (tenant, doc_id, embedding) SELECT $1, id, embedding::vector(384)"
                f" FROM {t.schema}.search_docs"
                " WHERE embedding IS NOT NULL",
                key,
            )
        await conn.execute("SET maintenance_work_mem = '1GB'")
        start = time.perf_counter()
        await conn.execute("CREATE INDEX ON bench_shared USING hnsw (embedding vector_cosine_ops)")
        out["build s"] = time.perf_counter() - start
        await conn.execute("ANALYZE bench_shared")
        out["self-hit"] = await self_hits(conn, "bench_shared", "embedding", "true")
        small = "bench-small"
        for scan in ("off", "relaxed_order"):
            recalls, times = [], []
            for v in vectors:
                literal = "[" + ",".join(map(str, v)) + "]"
                async with conn.transaction():
                    await conn.execute(f"SET LOCAL hnsw.iterative_scan = {scan}")
                    await conn.execute("SET LOCAL hnsw.ef_search = 100")
                    ms, rows = await timed(
                        lambda literal=literal: conn.fetch(
                            "SELECT doc_id FROM bench_shared WHERE tenant = $1"
                            " ORDER BY embedding <=> $2::text::vector(384) LIMIT 10",
                            small,
                            literal,
                        )
                    )
                    await conn.execute("SET LOCAL enable_indexscan = off")
                    exact = await conn.fetch(
                        "SELECT doc_id FROM bench_shared WHERE tenant = $1"
                        " ORDER BY embedding <=> $2::text::vector(384) LIMIT 10",
                        small,
                        literal,
                    )
                truth = {r[0] for r in exact}
                recalls.append(len(truth & {r[0] for r in rows}) / max(len(truth), 1))
                times.append(ms)
            out[f"small tenant, iterative_scan={scan}"] = {
                "recall@10": statistics.mean(recalls),
                "p50 ms": pct(times, 50),
            }
        await conn.execute("DROP TABLE bench_shared")
    finally:
        await conn.close()
    return out


async def main(args: argparse.Namespace) -> dict[str, Any]:
    base = provision.with_local_database(
        # the ingest waits for its vectors (a server leaves them to the filler after 50 ms)
        Settings(embedding_cache_size=0, statement_timeout_ms=600_000, embed_write_budget_ms=10_000)
    )
    name = env.scratch_name("search") if args.quick else BENCH_DB
    print(f"database {name!r} ...", flush=True)
    settings = (await bench_db(base, name, args.reuse)).model_copy(update={"pool_min_size": 1})
    owner_url = settings.admin_dsn()
    db = Database.from_settings(settings)
    await db.open()
    indexer = Indexer.from_settings(db, settings)
    await indexer.start(fill=False)
    if indexer.model is None or indexer.embedder is None:
        raise SystemExit(f"the search benchmark needs an embedding model; this server's: {indexer.state()}")
    model = indexer.model
    limits = dataclasses.replace(Limits.from_settings(settings), max_batch=BATCH)
    memory = Entities(db, indexer, Cursors(), limits)
    report: dict[str, Any] = {"load average at start": os.getloadavg()[0]}

    small = corpus.entities(args.small, seed=1)
    large = corpus.entities(args.large, seed=2)
    if not args.reuse:
        print(f"ingesting {len(small)} + {args.real} entities with the local model ...", flush=True)
        s1, _ = await ingest(memory, "bench-small", small)
        s2, _ = await ingest(memory, "bench-large", large[: args.real])
        n = len(small) + args.real
        report["ingest, local model"] = {"entities/s": n / (s1 + s2), "texts/s": 3 * n / (s1 + s2)}

        print(f"ingesting {args.pending} entities with embeddings pending ...", flush=True)
        seconds, pending = await ingest(
            Entities(db, Indexer(db, None, batch_size=64), Cursors(), limits),
            "bench-pending",
            corpus.entities(args.pending, seed=3),
        )
        report["ingest, embeddings pending"] = {
            "entities/s": args.pending / seconds,
            "texts/s": pending / seconds,
            "pending texts": pending,
        }

        large_tenant = await db.tenant("bench-large")
        owner = await asyncpg.connect(owner_url, server_settings={"search_path": "ag_catalog, public"})
        try:
            await owner.execute(f"DROP INDEX IF EXISTS {large_tenant.schema}.search_docs_vec_{model.id}")
            async with db.transaction(large_tenant, readonly=True) as tx:
                rows = await tx.fetch("SELECT embedding::text FROM {s}.search_docs WHERE embedding IS NOT NULL")
            centres = np.array([[float(x) for x in r[0][1:-1].split(",")] for r in rows])
            print(f"ingesting {args.large - args.real} entities with synthetic vectors ...", flush=True)
            bulk = Entities(db, SyntheticIndexer(db, model, centres), Cursors(), limits)
            seconds, _ = await ingest(bulk, "bench-large", large[args.real :])
            report["ingest, vectors supplied (no vector index)"] = {
                "entities/s": (args.large - args.real) / seconds,
                "texts/s": 3 * (args.large - args.real) / seconds,
            }
            print("building the large tenant's HNSW index ...", flush=True)
            await owner.execute("SET maintenance_work_mem = '1GB'")
            await owner.execute("SET statement_timeout = 0")
            start = time.perf_counter()
            await owner.execute("SELECT engram.ensure_vector_index($1, $2::smallint)", large_tenant.schema, model.id)
            report["HNSW build, large tenant (s)"] = time.perf_counter() - start
            for t in ("bench-small", "bench-large"):
                schema = (await db.tenant(t)).schema
                await owner.execute(f"ANALYZE {schema}.search_docs, {schema}.entities")
        finally:
            await owner.close()

    tenants = {key: await db.tenant(key) for key in ("bench-small", "bench-large")}
    owner = await asyncpg.connect(owner_url, server_settings={"search_path": "ag_catalog, public"})
    try:
        for key, t in tenants.items():
            report[f"{key} texts"] = await owner.fetchval(f"SELECT count(*) FROM {t.schema}.search_docs")
            expr, where = f"embedding::vector({model.dimensions})", f"model_id = {model.id}"
            hits = await self_hits(owner, f"{t.schema}.search_docs", expr, where)
            if hits < 0.7:  # a broken build: build it again, one process, and say so
                print(f"{key}: index self-hit {hits:.2f}, rebuilding without parallel workers ...", flush=True)
                await owner.execute("SET max_parallel_maintenance_workers = 0")
                await owner.execute("SET maintenance_work_mem = '1GB'")
                await owner.execute(f"REINDEX INDEX {t.schema}.search_docs_vec_{model.id}")
                report[f"{key} index rebuilt (self-hit before)"] = hits
                hits = await self_hits(owner, f"{t.schema}.search_docs", expr, where)
            report[f"{key} index self-hit"] = hits
    finally:
        await owner.close()

    questions = corpus.queries(args.queries, seed=4)
    embed_ms, vectors = [], []
    for q in questions:
        ms, v = await timed(lambda q=q: indexer.embedder.embed([q], scope=str(uuid.uuid4())))  # type: ignore[union-attr]
        embed_ms.append(ms)
        vectors.append(v[0])
    report["query embedding p50 ms"] = pct(embed_ms, 50)

    cursors, limits = Cursors(), Limits(max_results=200)
    pager, common, ef_search = Pager(cursors, limits), CommonWords(), settings.search_ef_search
    search = Search(db, indexer, cursors, limits, pager=pager, common_words=common, ef_search=ef_search)
    for key, t in tenants.items():
        report[f"{key} vector ranking"] = await vector_recall(
            db, owner_url, settings.search_ef_search, model, t, vectors
        )
        for mode in ("hybrid", "semantic", "keyword"):
            times = []
            for q in questions:
                ms, _ = await timed(lambda q=q, mode=mode, key=key: search.search(who(key), Query(text=q, mode=mode)))
                times.append(ms)
            report[f"{key} search {mode} ms"] = {"p50": pct(times, 50), "p95": pct(times, 95)}
        remember = Recall(db, indexer, cursors, limits, pager=pager, common_words=common, ef_search=ef_search)
        for mode in ("hybrid", "keyword"):
            times = []
            for q in questions:
                query = RecallQuery(text=q, mode=mode)
                ms, _ = await timed(lambda query=query, key=key, r=remember: r.recall(who(key), query))
                times.append(ms)
            report[f"{key} recall {mode} ms"] = {"p50": pct(times, 50), "p95": pct(times, 95)}

    if not args.no_shared:
        print("building a shared table of both tenants for comparison ...", flush=True)
        report["shared table"] = await shared_table(owner_url, tenants, vectors)

    await indexer.stop()
    await db.close()
    report["load average at end"] = os.getloadavg()[0]
    print_report(report, args)
    return report


def problems(report: dict[str, Any], args: argparse.Namespace) -> list[str]:
    """Figures the run should have produced and did not (nothing about how fast they were)."""
    found = []
    for key in ("bench-small", "bench-large"):
        if not report.get(f"{key} texts"):
            found.append(f"{key}: no indexed texts")
        ranking = report.get(f"{key} vector ranking") or {}
        if not all(k in ranking for k in ("recall@10", "ann p50 ms", "exact p50 ms")):
            found.append(f"{key}: no vector ranking figures")
        for mode in ("hybrid", "semantic", "keyword"):
            if not (report.get(f"{key} search {mode} ms") or {}).get("p50"):
                found.append(f"{key}: no {mode} search figures")
        for mode in ("hybrid", "keyword"):
            if not (report.get(f"{key} recall {mode} ms") or {}).get("p50"):
                found.append(f"{key}: no {mode} recall figures")
    if not args.reuse:
        for key in ("ingest, local model", "ingest, embeddings pending", "ingest, vectors supplied (no vector index)"):
            if not (report.get(key) or {}).get("entities/s"):
                found.append(f"{key}: no figures")
        if not (report.get("ingest, embeddings pending") or {}).get("pending texts"):
            found.append("ingest, embeddings pending: no texts were left pending")
    if not args.no_shared and "recall@10" not in report.get("shared table", {}).get(
        "small tenant, iterative_scan=off", {}
    ):
        found.append("shared table: no figures")
    return found


def print_report(report: dict[str, Any], args: argparse.Namespace) -> None:
    from importlib import metadata

    print(f"\n# search benchmark, {time.strftime('%Y-%m-%d')}")
    runtime = f"onnxruntime {metadata.version('onnxruntime')}"  # the local embedding provider's
    print(f"{platform.node()}: {platform.processor() or platform.machine()}, {runtime}")
    print(f"large {args.large} entities ({args.real} with real embeddings), small {args.small}, {args.queries} queries")
    for key, value in report.items():
        if isinstance(value, dict):
            inner = ", ".join(f"{k} {_fmt(v)}" for k, v in value.items())
            print(f"- {key}: {inner}")
        else:
            print(f"- {key}: {_fmt(value)}")


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}" if value < 10 else f"{value:.0f}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} {_fmt(v)}" for k, v in value.items()) + "}"
    return str(value)


# --quick: every step on a few hundred entities in a scratch database (see env.scratch_name).
QUICK = {"large": 300, "small": 100, "real": 100, "pending": 100, "queries": 5}
FULL = {"large": 100_000, "small": 1_000, "real": 2_000, "pending": 10_000, "queries": 100}


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a few hundred entities in a scratch database")
    parser.add_argument("--large", type=int, help=f"default {FULL['large']:,}; quick {QUICK['large']}")
    parser.add_argument("--small", type=int, help=f"default {FULL['small']:,}; quick {QUICK['small']}")
    parser.add_argument("--real", type=int, help="large-tenant entities embedded by the model (default 2,000)")
    parser.add_argument("--pending", type=int, help="entities for the pending-ingestion figure (default 10,000)")
    parser.add_argument("--queries", type=int, help=f"default {FULL['queries']}; quick {QUICK['queries']}")
    parser.add_argument("--reuse", action="store_true", help="keep the loaded database, measure searches only")
    parser.add_argument("--no-shared", action="store_true", help="skip the shared-table comparison")
    args = parser.parse_args()
    if args.quick and args.reuse:
        parser.error("--quick makes its database anew; it cannot --reuse one")
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.real > args.large:
        parser.error("--real cannot exceed --large")
    started = time.monotonic()
    report = asyncio.run(main(args))
    wrong = problems(report, args)
    for line in wrong:
        print(f"FAILED {line}", file=sys.stderr)
    print(f"{'quick run' if args.quick else 'run'} took {time.monotonic() - started:.0f} s")
    if wrong:
        sys.exit(1)


if __name__ == "__main__":
    cli()
