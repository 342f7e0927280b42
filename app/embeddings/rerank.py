"""A cross-encoder reranker on ONNX Runtime: how well each text answers a query, read together.

An embedding compares a query's vector with each text's, made apart; a cross-encoder reads the
query and the text as one input and scores the pair, which separates near-misses an embedding
cannot (docs/search.md, "Stronger models: candidates"). It costs a run of the model per text, so
recall gives it only the first few facts of its ranking (ENGRAM_RERANK_DEPTH).

The model is a directory of the kind onnx_model.py reads (`model.onnx`, `tokenizer.json`,
`engram-model.json` with kind `reranker`): a BERT-like graph whose first output is one logit per
pair. Pairs are sorted by length and run in batches of similar lengths, on a thread of the
reranker's own, so the event loop keeps serving and embeddings keep their pool.
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

logger = logging.getLogger(__name__)


class _Loaded:
    """The model and its tokenizer, on the reranker's thread."""

    def __init__(self, directory: Path, card: Card, threads: int) -> None:
        self._session = inference_session(directory, threads)
        self._inputs = {i.name for i in self._session.get_inputs()}
        self._tokenizer = tokenizer(directory, min(card.max_tokens, PAIR_TOKENS))

    def scores(self, query: str, texts: list[str]) -> list[float]:
        encoded = self._tokenizer.encode_batch([(query, t) for t in texts])
        out = [0.0] * len(texts)
        for run in batches([len(e.ids) for e in encoded], _PAIRS_PER_RUN, _TOKENS_PER_RUN):
            feed = padded([encoded[i].ids for i in run], [encoded[i].type_ids for i in run])
            logits = self._session.run(None, {k: v for k, v in feed.items() if k in self._inputs})[0]
            for i, logit in zip(run, logits.reshape(len(run), -1)[:, 0].tolist(), strict=True):
                out[i] = logit
        return out


class CrossEncoder:
    """A reranker loaded from a model directory: `scores(query, texts)`, higher is a better answer."""

    def __init__(self, directory: str, *, threads: int = 1) -> None:
        self._directory = Path(directory)
        self.card = Card.read(self._directory, "reranker")
        self.model = self.card.name
        self._threads = threads
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rerank")
        self._loading: Future[_Loaded] | None = None
        self._loaded: _Loaded | None = None

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

    async def scores(self, query: str, texts: Sequence[str]) -> list[float]:
        """Each text's score as an answer to `query` (the model's logit), in order."""
        if self._loaded is None:
            raise EmbeddingError("the reranker is not loaded")
        if not texts:
            return []
        loop = asyncio.get_running_loop()
        result: list[float] = await loop.run_in_executor(self._executor, self._loaded.scores, query, list(texts))
        return result

    async def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def reranker(directory: str | None, threads: int) -> CrossEncoder | None:
    """The reranker a setting names (a model directory), or None when none is."""
    return CrossEncoder(directory, threads=threads) if directory else None
