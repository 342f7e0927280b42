"""sentence-transformers on torch, on this machine's CPU (or GPU): the `sentence-transformers`
provider, the optional `torch` extra. Any model sentence-transformers loads; all-MiniLM-L6-v2 from
the files shipped in this package (local.BUNDLED), offline. The default model runs lighter on the `local` provider
(local.py), with the same vectors.

Encoding runs on one worker thread, so the event loop keeps serving while a batch is encoded and
two batches never compete for the same cores. Large inputs are encoded chunk by chunk, so a
query waits behind at most one chunk of someone's bulk write.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from app.embeddings.local import bundled_model_dir
from app.embeddings.provider import BUNDLED_NAMES, DEFAULT_LOCAL_MODEL, EmbeddingError, Provider, Vector

logger = logging.getLogger(__name__)


class SentenceTransformersModel(Provider):
    kind = "sentence-transformers"

    def __init__(
        self,
        model: str = DEFAULT_LOCAL_MODEL,
        *,
        dimensions: int | None = None,
        device: str | None = None,
        threads: int = 1,
        batch_size: int = 64,
    ) -> None:
        """`model`: a sentence-transformers name or path; `dimensions`, when given, is checked against
        the loaded model's; `device`: the torch device (None picks one); `threads`: CPU threads of
        the model; `batch_size`: texts encoded at once."""
        self.model = model
        self.dimensions = dimensions or 0  # known once loaded
        self._expected_dimensions = dimensions
        self._device = device
        self._threads = threads
        self._batch_size = self.job_texts = batch_size
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed")
        self._st: Any = None

    async def start(self) -> None:
        if self._st is None:
            self._st = await asyncio.get_running_loop().run_in_executor(self._executor, self._load)

    def _load(self) -> Any:
        try:
            import torch
            from sentence_transformers import SentenceTransformer
            from transformers.utils import logging as hf_logging
        except ImportError as exc:
            raise EmbeddingError(
                "ENGRAM_EMBEDDING_PROVIDER=sentence-transformers needs the `torch` extra "
                "(pip install 'engram-graph[torch]', on torch's CPU or GPU build)"
            ) from exc
        hf_logging.disable_progress_bar()
        # torch starts a thread per core; when the cores are shared (with PostgreSQL, other pods),
        # its threads wait for each other: one query took 210-270 ms with 2 threads, 14-24 ms with 1.
        torch.set_num_threads(self._threads)
        source: str = self.model
        offline = False
        if self.model in BUNDLED_NAMES and (bundled := bundled_model_dir()) is not None:
            source, offline = str(bundled), True
        try:
            st = SentenceTransformer(source, device=self._device, local_files_only=offline)
        except (OSError, ValueError) as exc:
            raise EmbeddingError(f"cannot load embedding model {self.model!r}: {exc}") from exc
        dimensions = st.get_embedding_dimension()
        if dimensions is None:
            raise EmbeddingError(f"model {self.model!r} does not say how long its vectors are")
        if self._expected_dimensions and dimensions != self._expected_dimensions:
            raise EmbeddingError(
                f"model {self.model!r} makes {dimensions}-d vectors, ENGRAM_EMBEDDING_DIMENSIONS says "
                f"{self._expected_dimensions}"
            )
        self.dimensions = dimensions
        logger.info("embedding model %s loaded (%d dimensions, %s)", self.model, dimensions, st.device)
        return st

    def _encode(self, texts: list[str]) -> list[Vector]:
        vectors = self._st.encode(
            texts,
            batch_size=self._batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return vectors.tolist()

    async def embed(self, texts: Sequence[str], *, attempts: int | None = None) -> list[Vector]:
        if self._st is None:
            raise EmbeddingError("the local embedding model is not loaded")
        loop = asyncio.get_running_loop()
        out: list[Vector] = []
        for start in range(0, len(texts), self._batch_size):
            chunk = list(texts[start : start + self._batch_size])
            out.extend(await loop.run_in_executor(self._executor, self._encode, chunk))
        return out

    async def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
