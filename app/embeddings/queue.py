"""The embedding pool: jobs of a few texts each, taken in priority order by a fixed number of workers.

Why: with one first-come queue, a search waited for its query's vector behind every write's texts,
and a write behind every other write's. Here queries have workers of their own, so a query never
waits for bulk work, only for the CPU; bulk jobs are small and taken in priority order, a write's
ahead of the background filler's. A caller that stops waiting (a write whose budget ran out) drops
its jobs that have not started; those running finish, and their vectors land in the cache, where
the filler finds them.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from asyncio import Future
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import IntEnum

from app.embeddings.provider import EmbeddingError, Vector
from app.observability import metrics


class Priority(IntEnum):
    QUERY = 0  # a search's query: someone waits for the answer
    WRITE = 1  # a write's texts, within its budget
    FILL = 2  # the background filler: nobody waits


class QueueFull(EmbeddingError):
    """More write texts wait than the pool holds (ENGRAM_EMBEDDING_QUEUE_TEXTS): they stay pending."""


@dataclass(order=True)
class _Job:
    priority: int
    seq: int
    size: int = field(compare=False)
    run: Callable[[], Awaitable[list[Vector]]] = field(compare=False)
    future: asyncio.Future[list[Vector]] = field(compare=False)
    queued: float = field(compare=False)
    started: bool = field(default=False, compare=False)


class EmbeddingQueue:
    """`workers` query jobs and `workers` bulk jobs (writes, fills) at once at most; at most
    `max_write_texts` texts of writes waiting (queries are one text each and bounded by the calls
    admitted; the filler queues one batch at a time)."""

    def __init__(self, *, workers: int, max_write_texts: int) -> None:
        self.workers = workers
        self.max_write_texts = max_write_texts
        self._seq = itertools.count()
        self._waiting = dict.fromkeys(Priority, 0)  # texts per priority, not started
        self._queries: asyncio.PriorityQueue[_Job] | None = None
        self._bulk: asyncio.PriorityQueue[_Job] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    def waiting(self, priority: Priority) -> int:
        return self._waiting[priority]

    def submit(self, priority: Priority, size: int, run: Callable[[], Awaitable[list[Vector]]]) -> Future[list[Vector]]:
        """Queue `run` (embeds `size` texts); the future ends with its vectors. Cancelling the future
        before a worker takes the job drops it."""
        self._start()
        if priority is Priority.WRITE and self._waiting[priority] + size > self.max_write_texts:
            raise QueueFull(f"{self._waiting[priority]} write texts already wait for the embedding pool")
        assert self._loop is not None and self._queries is not None and self._bulk is not None
        job = _Job(priority, next(self._seq), size, run, self._loop.create_future(), time.monotonic())
        job.future.add_done_callback(lambda _: self._dropped(job))
        (self._queries if priority is Priority.QUERY else self._bulk).put_nowait(job)
        self._count(job, +1)
        return job.future

    def _start(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is loop:
            return
        self._loop, self._queries, self._bulk = loop, asyncio.PriorityQueue(), asyncio.PriorityQueue()
        self._waiting = dict.fromkeys(Priority, 0)
        self._tasks = [
            loop.create_task(self._work(jobs), name=f"embedding {lane} worker {n}")
            for lane, jobs in (("query", self._queries), ("bulk", self._bulk))
            for n in range(self.workers)
        ]

    def _count(self, job: _Job, sign: int) -> None:
        self._waiting[Priority(job.priority)] += sign * job.size
        metrics.EMBED_QUEUE.labels(Priority(job.priority).name.lower()).set(self._waiting[Priority(job.priority)])

    def _dropped(self, job: _Job) -> None:
        if job.future.cancelled() and not job.started:
            job.started = True  # no longer waiting: a worker skips it
            self._count(job, -1)

    async def _work(self, jobs: asyncio.PriorityQueue[_Job]) -> None:
        while True:
            job = await jobs.get()
            if job.started:  # dropped while waiting
                continue
            job.started = True
            self._count(job, -1)
            metrics.EMBED_WAIT.labels(Priority(job.priority).name.lower()).observe(time.monotonic() - job.queued)
            try:
                vectors = await job.run()
            except asyncio.CancelledError:
                if not job.future.done():
                    job.future.cancel()
                raise
            except Exception as exc:
                if not job.future.done():
                    job.future.set_exception(exc)
            else:
                if not job.future.done():
                    job.future.set_result(vectors)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, RuntimeError):
                await task
        self._tasks, self._loop = [], None
