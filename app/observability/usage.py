"""Per-tenant usage counts, gathered in memory and added to the database every few seconds.

Tenants are not metric labels (unbounded cardinality); operators read usage from the table
(`engram usage`) instead.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

logger = logging.getLogger(__name__)

Flush = Callable[[list[dict[str, Any]]], Awaitable[None]]


class Usage:
    def __init__(self) -> None:
        self._calls: Counter[tuple[str, str]] = Counter()
        self._errors: Counter[tuple[str, str]] = Counter()

    def count(self, tenant: str, tool: str, *, ok: bool) -> None:
        self._calls[(tenant, tool)] += 1
        if not ok:
            self._errors[(tenant, tool)] += 1

    def take(self) -> list[dict[str, Any]]:
        calls, errors = self._calls, self._errors
        self._calls, self._errors = Counter(), Counter()
        return [{"tenant": t, "tool": tool, "calls": n, "errors": errors[(t, tool)]} for (t, tool), n in calls.items()]

    async def flush_every(self, seconds: float, flush: Flush) -> None:
        """Runs until cancelled; a last flush happens on the way out."""
        try:
            while True:
                await asyncio.sleep(seconds)
                await self._flush(flush)
        finally:
            await self._flush(flush)

    async def _flush(self, flush: Flush) -> None:
        counts = self.take()
        if not counts:
            return
        try:
            await flush(counts)
        except Exception:  # usage is best effort: never let it take the server down
            logger.warning("could not record usage counts", exc_info=True)
