"""A cross-encoder reranker on ONNX Runtime: how well each text answers a query, read together.

An embedding compares a query's vector with each text's, made apart; a cross-encoder reads the
query and the text as one input and scores the pair, which separates near-misses an embedding
cannot (docs/search.md, "Stronger models: candidates"). It costs a run of the model per text, so
recall gives it only the first few facts of its ranking (ENGRAM_RERANK_DEPTH).

The model is a directory of the kind onnx_model.py reads (`model.onnx`, `tokenizer.json`,
`engram-model.json` with kind `reranker`): a BERT-like graph whose first output is one logit per
pair. Pairs are sorted by length and run in batches of similar lengths, on a thread of the
reranker's own, so the event loop keeps serving and embeddings keep their pool.

A call waits for its scores at most `within` seconds (ENGRAM_RERANK_BUDGET_MS, or less when its
deadline is nearer); past that, or when the call is cancelled, its job stops where it is (not yet
begun: dropped; running: ONNX Runtime's terminate flag ends the current run), so late work never
piles up behind the next call. With one job running and one waiting, a third is skipped at once
(`Skipped`): it could not start within a budget anyway.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from app.embeddings.local import batches
from app.embeddings.onnx_model import Card, inference_session, padded, tokenizer
from app.embeddings.provider import EmbeddingError

PAIR_TOKENS = 256  # a pair is cut here (the text's end first): facts are short, and the cost grows with it
_TOKENS_PER_RUN = 1024  # padded tokens in one run of the model
_PAIRS_PER_RUN = 32
JOBS_MAX = 2  # one running, one waiting

logger = logging.getLogger(__name__)


class Skipped(Exception):
    """The reranker gave no scores in time, or was too busy to try: the reason, for a notice."""


class _Job:
    """One call's scoring, stopped wherever it is once its caller stops waiting."""

    def __init__(self) -> None:
        import onnxruntime  # loaded with the model (onnx_model.py), not on import

        self.options = onnxruntime.RunOptions()
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True
        self.options.terminate = True  # ends a run in progress (it raises in the reranker's thread)


class _Loaded:
    """The model and its tokenizer, on the reranker's thread."""

    def __init__(self, directory: Path, card: Card, threads: int) -> None:
        self._session = inference_session(directory, threads)
        self._inputs = {i.name for i in self._session.get_inputs()}
        self._tokenizer = tokenizer(directory, min(card.max_tokens, PAIR_TOKENS))

    def scores(self, query: str, texts: list[str], job: _Job) -> list[float] | None:
        """The scores, or None when the job was stopped before they were all made."""
        if job.stopped:
            return None
        encoded = self._tokenizer.encode_batch([(query, t) for t in texts])
        out = [0.0] * len(texts)
        for run in batches([len(e.ids) for e in encoded], _PAIRS_PER_RUN, _TOKENS_PER_RUN):
            if job.stopped:
                return None
            feed = padded([encoded[i].ids for i in run], [encoded[i].type_ids for i in run])
            try:
                logits = self._session.run(None, {k: v for k, v in feed.items() if k in self._inputs}, job.options)[0]
            except Exception as exc:
                if job.stopped:  # terminated on purpose
                    return None
                raise EmbeddingError(f"the reranker failed: {exc}") from exc
            for i, logit in zip(run, logits.reshape(len(run), -1)[:, 0].tolist(), strict=True):
                out[i] = logit
        return out


class CrossEncoder:
    """A reranker loaded from a model directory: `scores(query, texts)`, higher is a better answer."""

    def __init__(self, directory: str, *, threads: int = 1, budget_ms: int | None = None) -> None:
        self._directory = Path(directory)
        self.budget = budget_ms / 1000 if budget_ms is not None else None  # seconds a call waits at most
        self.card = Card.read(self._directory, "reranker")
        self.model = self.card.name
        self._threads = threads
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rerank")
        self._loading: Future[_Loaded] | None = None
        self._loaded: _Loaded | None = None
        self._jobs: set[Future[list[float] | None]] = set()  # not yet done: waiting or running

    async def start(self) -> None:
        if self._loading is None:
            self._loading = self._executor.submit(self._load)
        self._loaded = await asyncio.wrap_future(self._loading)
        logger.info("reranker %s loaded (onnxruntime)", self.model)

    def _load(self) -> _Loaded:
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        try:
            return _Loaded(self._directory, self.card, self._threads)
        except Exception as exc:  # a damaged or different model: refuse to serve, saying why
            raise EmbeddingError(f"cannot load reranker {self.model!r}: {exc}") from exc

    async def scores(self, query: str, texts: Sequence[str], within: float | None = None) -> list[float]:
        """Each text's score as an answer to `query` (the model's logit), in order, within `within`
        seconds (None: however long it takes); `Skipped` when not."""
        if self._loaded is None:
            raise EmbeddingError("the reranker is not loaded")
        if not texts:
            return []
        if within is not None and within <= 0:
            raise Skipped("no time left in the call")
        if len(self._jobs) >= JOBS_MAX:
            raise Skipped("the reranker is busy")
        job = _Job()
        future = self._executor.submit(self._loaded.scores, query, list(texts), job)
        self._jobs.add(future)
        future.add_done_callback(self._jobs.discard)
        try:
            async with asyncio.timeout(within):
                result = await asyncio.wrap_future(future)
        except TimeoutError:
            raise Skipped("over its time budget") from None
        finally:
            job.stop()  # done already: nothing; else dropped, or its run ended
            future.cancel()
        assert result is not None  # only a stopped job has none
        return result

    async def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def reranker(directory: str | None, threads: int, budget_ms: int) -> CrossEncoder | None:
    """The reranker a setting names (a model directory), or None when none is."""
    return CrossEncoder(directory, threads=threads, budget_ms=budget_ms) if directory else None
