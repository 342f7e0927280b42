"""Latency and throughput summaries, and the loops that collect them."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Latency:
    """Per-call latency in milliseconds over `n` calls."""

    n: int
    p50: float
    p95: float
    p99: float
    mean: float
    max: float

    @classmethod
    def of(cls, samples_ns: list[int]) -> Latency:
        ms = sorted(s / 1e6 for s in samples_ns)
        return cls(len(ms), _pct(ms, 50), _pct(ms, 95), _pct(ms, 99), statistics.fmean(ms), ms[-1])

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _pct(ordered: list[float], p: float) -> float:
    """Nearest-rank percentile of an already sorted list."""
    rank = max(1, round(p / 100 * len(ordered) + 0.5 - 1e-9))
    return ordered[min(rank, len(ordered)) - 1]


async def timed(call: Callable[[int], Awaitable[Any]], iterations: int, warmup: int) -> Latency:
    """Latency of `call(i)`, run one at a time `iterations` times after `warmup` untimed calls."""
    for i in range(warmup):
        await call(-1 - i)
    samples = []
    for i in range(iterations):
        start = time.perf_counter_ns()
        await call(i)
        samples.append(time.perf_counter_ns() - start)
    return Latency.of(samples)


async def paired(calls: dict[str, Callable[[int], Awaitable[Any]]], iterations: int, warmup: int) -> dict[str, Latency]:
    """Latency of several ways to do the same i-th thing, taken in turns (the order rotating), so
    each sees the same cache and background load; a later one is not favoured by an earlier one."""
    names = list(calls)
    for i in range(warmup):
        for name in names:
            await calls[name](-1 - i)
    samples: dict[str, list[int]] = {name: [] for name in names}
    for i in range(iterations):
        for k in range(len(names)):
            name = names[(i + k) % len(names)]
            start = time.perf_counter_ns()
            await calls[name](i)
            samples[name].append(time.perf_counter_ns() - start)
    return {name: Latency.of(s) for name, s in samples.items()}


@dataclass(frozen=True, slots=True)
class Throughput:
    """Calls per second sustained by `workers` concurrent callers over `seconds`, with their latency."""

    workers: int
    calls: int
    errors: int
    seconds: float
    per_second: float
    latency: Latency

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "latency": self.latency.as_dict()}


async def saturate(calls: list[Callable[[], Awaitable[Any]]], seconds: float, warmup: float) -> Throughput:
    """Run each of `calls` in its own loop, back to back, for `warmup` + `seconds`; count the timed part.

    A call returning False (or raising) counts as an error, so a broken server cannot look fast.
    """
    samples: list[int] = []
    errors = 0
    started = time.perf_counter()
    measure_from = started + warmup
    stop_at = measure_from + seconds

    async def loop(call: Callable[[], Awaitable[Any]]) -> None:
        nonlocal errors
        while (now := time.perf_counter()) < stop_at:
            t0 = time.perf_counter_ns()
            try:
                ok = await call()
            except Exception:
                ok = False
            if now >= measure_from:
                samples.append(time.perf_counter_ns() - t0)
                errors += ok is False

    await asyncio.gather(*(loop(c) for c in calls))
    elapsed = time.perf_counter() - measure_from
    return Throughput(len(calls), len(samples), errors, elapsed, len(samples) / elapsed, Latency.of(samples))
