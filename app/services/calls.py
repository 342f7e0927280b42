"""How the body of one call runs: within its deadline, again after a lost race, and with every
way the database fails to be there reported as `unavailable`."""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from app.observability import metrics
from app.observability.context import CALL, deadline
from app.store.errors import RETRYABLE, Unavailable, is_outage

T = TypeVar("T")
ATTEMPTS = 3

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

    Safe because each call is one transaction: the failed attempt left nothing behind.
    """
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return await fn(*args, **kwargs)
        except RETRYABLE:
            if attempt == ATTEMPTS:
                raise
            metrics.DB_RETRIES.inc()
            await asyncio.sleep(random.uniform(0.005, 0.05) * attempt)  # noqa: S311 - jitter, not security
    raise AssertionError("unreachable")
