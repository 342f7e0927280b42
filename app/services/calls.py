"""How the body of one call runs: within its deadline, again after a lost race, and with every
way the database fails to be there reported as `unavailable`."""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from app.observability import metrics
from app.observability.context import CALL, DEADLINE, deadline
from app.store.errors import RETRYABLE, Moving, Unavailable, is_outage

T = TypeVar("T")
ATTEMPTS = 3
# A call finding its tenant mid-move waits this long, growing to the second, between attempts.
MOVING_WAIT = (0.05, 0.5)

# Past the deadline, the database work has already failed (its connection is terminated then);
# this margin bounds whatever else a call waits for.
GRACE = 0.5


async def within(seconds: float, run: Callable[[], Awaitable[T]], *, writes: bool = False) -> T:
    """Run a call's body within its deadline; every way the database fails to be there is `unavailable`."""
    with deadline(seconds) as at:
        try:
            async with asyncio.timeout_at(at + GRACE if at != math.inf else None):
                return await run()
        except Unavailable as exc:
            if writes and "committed" not in exc.details:
                exc.details["committed"] = False  # failed before its transaction began
            raise
        except Exception as exc:
            if not is_outage(exc):
                raise
            call = CALL.get()
            committed = ("unknown" if call is not None and call.committing else False) if writes else None
            if isinstance(exc, TimeoutError):
                message = f"the call did not end within {seconds:g} s"
                raise Unavailable("deadline", message, committed=committed) from None
            message = f"the database is not reachable ({type(exc).__name__})"
            raise Unavailable("database_unreachable", message, committed=committed) from None


async def retrying(fn: Callable[..., Awaitable[T]], /, *args: Any, **kwargs: Any) -> T:
    """`fn(*args, **kwargs)`, the body of a call, run again if its transaction lost a deadlock or a
    serialization race.

    A tenant found moving (`Moving`) is tried again, resolved afresh, as long as the call's
    deadline leaves room: a move's cut-over lasts seconds.

    Safe because each call is one transaction: the failed attempt left nothing behind.
    """
    attempt = 0
    wait = MOVING_WAIT[0]
    while True:
        attempt += 1
        try:
            return await fn(*args, **kwargs)
        except Moving:
            at = DEADLINE.get()
            loop = asyncio.get_running_loop()
            if at is None or loop.time() + wait >= at:
                raise
            metrics.DB_RETRIES.inc()
            await asyncio.sleep(wait)
            wait = min(2 * wait, MOVING_WAIT[1])
        except RETRYABLE:
            if attempt == ATTEMPTS:
                raise
            metrics.DB_RETRIES.inc()
            await asyncio.sleep(random.uniform(0.005, 0.05) * attempt)  # noqa: S311 - jitter, not security
