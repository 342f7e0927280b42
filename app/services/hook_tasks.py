"""Work a hook starts that must not be cut short by its answer's deadline: keeping a turn, making
a tenant. The answer goes first (`{}` past ENGRAM_HOOK_DEADLINE_SECONDS); the work goes on after
it, bounded in time and in count, and the server's shutdown waits briefly for it.

Each task runs in a copy of the caller's context without the hook's deadline (DEADLINE), so the
pool does not terminate its connection when the answer's time is up; it gets its own bound instead.
A failure is logged as one warning line (the database down, slow or refused), never raised: no
caller awaits it beyond the answer.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from app.errors import EngramError
from app.observability.context import DEADLINE
from app.store.errors import DATABASE_ERRORS

logger = logging.getLogger(__name__)

T = TypeVar("T")


class Detached:
    """Tasks that outlive the request that started them: at most `limit` at once, each ended after
    `seconds`; `drain` waits for them at shutdown, then cancels what is left."""

    def __init__(self, limit: int, seconds: float) -> None:
        self.limit = limit
        self.seconds = seconds
        self._tasks: set[asyncio.Task[object]] = set()

    @property
    def pending(self) -> int:
        return len(self._tasks)

    def full(self) -> bool:
        return len(self._tasks) >= self.limit

    def start(self, what: str, run: Callable[[], Awaitable[T]]) -> asyncio.Task[T | None]:
        """`run()` in a task of its own, free of the caller's cancellation and (unless `limit` tasks
        run already: then it ends with the caller's deadline) of its deadline."""
        context = contextvars.copy_context()
        if self.full():
            logger.warning("hook %s bound to its answer's deadline: %d hook tasks running", what, self.pending)
        else:
            context.run(DEADLINE.set, None)
        task: asyncio.Task[T | None] = asyncio.get_running_loop().create_task(self._bounded(what, run), context=context)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _bounded(self, what: str, run: Callable[[], Awaitable[T]]) -> T | None:
        try:
            async with asyncio.timeout(self.seconds):
                return await run()
        except TimeoutError:
            logger.warning("hook %s given up: not done within %.1f s", what, self.seconds)
        except EngramError as exc:
            logger.warning("hook %s failed: %s: %s", what, exc.code, exc.message)
        except DATABASE_ERRORS as exc:
            logger.warning("hook %s failed: the database failed (%s)", what, type(exc).__name__)
        except Exception:
            logger.exception("hook %s failed", what)
        return None

    async def drain(self, seconds: float) -> int:
        """Wait up to `seconds` for the tasks still running, then cancel the rest; how many were cancelled."""
        if not self._tasks:
            return 0
        _, left = await asyncio.wait(set(self._tasks), timeout=seconds)
        for task in left:
            task.cancel()
        if left:
            await asyncio.wait(left, timeout=1)
            logger.warning("shutdown cancelled %d hook tasks still running", len(left))
        return len(left)
