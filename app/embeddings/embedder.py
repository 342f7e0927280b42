"""A provider behind a cache and a circuit breaker: what the rest of the server calls."""

from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Sequence

from app.embeddings.provider import EmbeddingError, InputRejected, Provider, Vector
from app.observability import metrics

logger = logging.getLogger(__name__)

_FIRST_PAUSE_SECONDS = 1.0
_LONGEST_PAUSE_SECONDS = 60.0


class ProviderDown(EmbeddingError):
    """The provider failed recently; calls fail at once until the next try is due."""


class Embedder:
    """Embeds texts once: each vector is cached by (scope, model, text hash).

    The scope is the tenant, so one tenant cannot learn from the speed of an answer that another
    tenant embedded the same text. After a failure the provider is left alone for a pause that
    doubles with each failure (1 s up to 60 s): writes and searches then go on without vectors
    at once instead of each waiting for a timeout.
    """

    def __init__(self, provider: Provider, cache_size: int) -> None:
        self.provider = provider
        self._cache: OrderedDict[tuple[str, str, bytes], Vector] = OrderedDict()
        self._cache_size = cache_size
        self._failures = 0
        self._next_try = 0.0
        self.last_error: str | None = None
        self.embedded = 0  # texts sent to the provider
        self.cache_hits = 0

    @property
    def model(self) -> str:
        return self.provider.model

    @property
    def dimensions(self) -> int:
        return self.provider.dimensions

    @property
    def healthy(self) -> bool:
        """False from a failure until the next success."""
        return self._failures == 0

    def seconds_until_retry(self) -> float:
        return max(0.0, self._next_try - time.monotonic())

    @property
    def breaker(self) -> str:
        """closed (the provider answers), open (calls fail at once) or half_open (the pause is over:
        the next call tries the provider); the engram_embedding_breaker_state metric."""
        if self._failures == 0:
            return "closed"
        return "open" if self.seconds_until_retry() > 0 else "half_open"

    @property
    def failures(self) -> int:
        """Consecutive failed requests."""
        return self._failures

    async def embed(self, texts: Sequence[str], *, scope: str, attempts: int | None = None) -> list[Vector]:
        keys = [(scope, self.model, hashlib.sha256(t.encode()).digest()) for t in texts]
        found: dict[tuple[str, str, bytes], Vector] = {}
        todo: dict[tuple[str, str, bytes], str] = {}
        for key, text in zip(keys, texts, strict=True):
            if (hit := self._cache.get(key)) is not None:
                self._cache.move_to_end(key)
                found[key] = hit
                self.cache_hits += 1
            else:
                todo[key] = text
        if todo:
            if self.seconds_until_retry() > 0:
                raise ProviderDown(f"embedding provider unavailable: {self.last_error}")
            kind = self.provider.kind
            metrics.EMBED_BATCH.labels(kind).observe(len(todo))
            started = time.perf_counter()
            try:
                vectors = await self.provider.embed(list(todo.values()), attempts=attempts)
            except InputRejected:
                metrics.EMBED_CALLS.labels(kind, "rejected").inc()
                raise  # one caller's texts: the provider is fine, other callers go on using it
            except Exception as exc:
                metrics.EMBED_CALLS.labels(kind, "error").inc()
                self._failed(exc)
                if isinstance(exc, EmbeddingError):
                    raise
                raise EmbeddingError(f"embedding failed: {type(exc).__name__}") from exc
            finally:
                metrics.EMBED_LATENCY.labels(kind).observe(time.perf_counter() - started)
            metrics.EMBED_CALLS.labels(kind, "ok").inc()
            self._succeeded()
            self.embedded += len(todo)
            for key, vector in zip(todo, vectors, strict=True):
                found[key] = vector
                self._remember(key, vector)
        return [found[key] for key in keys]

    def _remember(self, key: tuple[str, str, bytes], vector: Vector) -> None:
        if self._cache_size:
            self._cache[key] = vector
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)

    def _failed(self, exc: Exception) -> None:
        self._failures += 1
        pause = min(_LONGEST_PAUSE_SECONDS, _FIRST_PAUSE_SECONDS * 2 ** (self._failures - 1))
        self._next_try = time.monotonic() + pause
        self.last_error = str(exc) if isinstance(exc, EmbeddingError) else type(exc).__name__
        logger.warning("embedding provider failed (%s); next try in %.0f s", self.last_error, pause)

    def _succeeded(self) -> None:
        if self._failures:
            logger.info("embedding provider answers again")
        self._failures = 0
        self._next_try = 0.0
        self.last_error = None
