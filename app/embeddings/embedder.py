"""A provider behind a cache and a circuit breaker: what the rest of the server calls."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import time
from array import array
from collections import OrderedDict
from collections.abc import Sequence

from app.embeddings.provider import EmbeddingError, InputRejected, Provider, Vector
from app.embeddings.queue import EmbeddingQueue, Priority, QueueFull
from app.observability import metrics

logger = logging.getLogger(__name__)

_FIRST_PAUSE_SECONDS = 1.0
_LONGEST_PAUSE_SECONDS = 60.0
_Key = tuple[str, str, bytes]  # (scope, model, SHA-256 of the text)


class ProviderDown(EmbeddingError):
    """The provider failed recently; calls fail at once until the next try is due."""


class Embedder:
    """Embeds texts once: each vector is cached by (scope, model, text hash).

    The scope is the tenant, so one tenant cannot learn from the speed of an answer that another
    tenant embedded the same text. After a failure the provider is left alone for a pause that
    doubles with each failure (1 s up to 60 s): writes and searches then go on without vectors
    at once instead of each waiting for a timeout.
    """

    def __init__(
        self,
        provider: Provider,
        cache_size: int,
        *,
        workers: int = 1,
        queue_texts: int = 4096,
        first_pause: float = _FIRST_PAUSE_SECONDS,
    ) -> None:
        self.provider = provider
        self._first_pause = first_pause
        self.pool = EmbeddingQueue(workers=workers, max_write_texts=queue_texts)
        self._cache: OrderedDict[_Key, bytes] = OrderedDict()  # float32s, packed
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

    async def embed(
        self, texts: Sequence[str], *, scope: str, attempts: int | None = None, priority: Priority = Priority.QUERY
    ) -> list[Vector]:
        """A vector per text, in order: from the cache, or embedded by the pool at `priority`."""
        found, jobs = self._submit(texts, scope, attempts, priority)
        done = await asyncio.gather(*(job for _, job in jobs), return_exceptions=True)
        for (keys, _), vectors in zip(jobs, done, strict=True):
            if isinstance(vectors, BaseException):
                raise vectors
            found.update(zip(keys, vectors, strict=True))
        return [found[key] for key in self._keys(texts, scope, priority is Priority.QUERY)]

    async def embed_within(self, texts: Sequence[str], *, scope: str, seconds: float) -> dict[str, Vector]:
        """The vectors of those of `texts` embedded within `seconds`, at write priority, by text.

        Never fails and never waits longer: jobs not started by then are dropped (the caller leaves
        their texts to the background filler); jobs running go on and fill the cache."""
        try:
            found, jobs = self._submit(texts, scope, 1, Priority.WRITE)
        except EmbeddingError:
            found, jobs = {k: v for k in self._keys(texts, scope) if (v := self._cached(k)) is not None}, []
        try:
            if jobs:
                await asyncio.wait([job for _, job in jobs], timeout=seconds)
        finally:  # also when the call itself is cancelled (its deadline)
            for _, job in jobs:
                job.cancel()  # nothing, for a job that has ended
        for keys, job in jobs:
            if not job.cancelled() and job.exception() is None:
                found.update(zip(keys, job.result(), strict=True))
        by_key = dict(zip(self._keys(texts, scope), texts, strict=True))
        return {by_key[k]: v for k, v in found.items() if k in by_key}

    def _keys(self, texts: Sequence[str], scope: str, query: bool = False) -> list[_Key]:
        """Cache keys; a query of an asymmetric model has a vector of its own, under a key of its own."""
        mark = b"query\0" if query and self.provider.asymmetric else b""
        return [(scope, self.model, hashlib.sha256(mark + t.encode()).digest()) for t in texts]

    def forget(self, scope: str) -> None:
        """Drop the scope's cached vectors (a purge: what they were computed from is gone)."""
        for key in [k for k in self._cache if k[0] == scope]:
            del self._cache[key]

    def _cached(self, key: _Key) -> Vector | None:
        if (hit := self._cache.get(key)) is None:
            return None
        self._cache.move_to_end(key)
        self.cache_hits += 1
        return array("f", hit).tolist()

    def _submit(
        self, texts: Sequence[str], scope: str, attempts: int | None, priority: Priority
    ) -> tuple[dict[_Key, Vector], list[tuple[list[_Key], asyncio.Future[list[Vector]]]]]:
        """The cached vectors, and the pool's jobs for the rest, a few texts each (in order)."""
        found: dict[_Key, Vector] = {}
        todo: dict[_Key, str] = {}
        query = priority is Priority.QUERY
        for key, text in zip(self._keys(texts, scope, query), texts, strict=True):
            if (hit := self._cached(key)) is not None:
                found[key] = hit
            else:
                todo[key] = text
        if todo and self.seconds_until_retry() > 0:
            raise ProviderDown(f"embedding provider unavailable: {self.last_error}")
        keys, size, jobs = list(todo), self.provider.job_texts, []
        try:
            for start in range(0, len(keys), size):
                part = keys[start : start + size]
                run = functools.partial(self._run, part, [todo[k] for k in part], attempts, query)
                jobs.append((part, self.pool.submit(priority, len(part), run)))
        except QueueFull:
            for _, job in jobs:
                job.cancel()
            raise
        return found, jobs

    async def _run(self, keys: list[_Key], texts: list[str], attempts: int | None, query: bool) -> list[Vector]:
        """One job on a worker: the provider's call, its metrics, the circuit breaker, the cache."""
        kind = self.provider.kind
        metrics.EMBED_BATCH.labels(kind).observe(len(texts))
        started = time.perf_counter()
        embed = self.provider.embed_queries if query else self.provider.embed
        try:
            vectors = await embed(texts, attempts=attempts)
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
        self.embedded += len(texts)
        for key, vector in zip(keys, vectors, strict=True):
            self._remember(key, vector)
        return vectors

    def _remember(self, key: _Key, vector: Vector) -> None:
        if self._cache_size:
            self._cache[key] = array("f", vector).tobytes()  # 4 bytes a number, not a float object's 24 + 8
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
            metrics.EMBED_CACHED.set(len(self._cache))

    async def close(self) -> None:
        await self.pool.close()

    def _failed(self, exc: Exception) -> None:
        self._failures += 1
        pause = min(_LONGEST_PAUSE_SECONDS, self._first_pause * 2 ** (self._failures - 1))
        self._next_try = time.monotonic() + pause
        self.last_error = str(exc) if isinstance(exc, EmbeddingError) else type(exc).__name__
        logger.warning("embedding provider failed (%s); next try in %.0f s", self.last_error, pause)

    def _succeeded(self) -> None:
        if self._failures:
            logger.info("embedding provider answers again")
        self._failures = 0
        self._next_try = 0.0
        self.last_error = None
