"""The event loop's lag: how late a timer fires. Every request, tool call and stream of a process
shares one loop, so a blocking call (CPU-bound work, a synchronous library) delays them all; this
is the gauge that shows it, where latency histograms only show its effects."""

from __future__ import annotations

import asyncio

from app.observability import metrics


async def probe_lag(every: float = 0.1, window: float = 5.0) -> None:
    """Sleeps `every` seconds again and again, and sets engram_event_loop_lag_seconds to the largest
    delay past the asked sleep among the probes of each `window` (a stall between two scrapes is
    not averaged away). Runs until cancelled."""
    loop = asyncio.get_running_loop()
    worst, window_ends = 0.0, loop.time() + window
    while True:
        asked = loop.time()
        await asyncio.sleep(every)
        now = loop.time()
        worst = max(worst, now - asked - every)
        if now >= window_ends:
            metrics.LOOP_LAG.set(worst)
            worst, window_ends = 0.0, now + window
