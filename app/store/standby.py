"""A cell's standby, and when a read may go to it: it answers, streams, is at most `max_lag` seconds
behind its primary, and has replayed the reader's own last commit (read-your-writes)."""

from __future__ import annotations

import asyncio
import collections
import logging
import math
import time

import asyncpg
from cachetools import TTLCache

from app.observability.context import deadline
from app.store.errors import Unavailable
from app.store.pool import Pool

logger = logging.getLogger("engram.database")

# A standby's replay position and lag are probed again when older than this (by the read that finds them so).
STANDBY_PROBE_SECONDS = 0.5
# ... each probe within this much of the call's deadline; a standby that fails is left alone this long.
STANDBY_PROBE_BUDGET = 1.0
STANDBY_RETRY_SECONDS = 5.0
# The primary positions a standby's lag is measured against: one per probe, the last minute or so.
STANDBY_SAMPLES = 256


def lsn(text: str) -> int:
    """A WAL position (`16/B374D848`) as a number, to compare."""
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) + int(low, 16)


class Standby:
    """The `replica` of `primary`, with its last probe, and where recent writers' commits ended
    (the last `writers` of them, kept long enough for any standby fit to read from to pass them)."""

    def __init__(self, primary: Pool, replica: Pool, max_lag: float, *, writers: int = 10_000) -> None:
        self.primary = primary
        self.replica = replica
        self.max_lag = max_lag
        self._replayed = 0  # the standby's replay position at its last probe
        self._lag: float | None = None  # seconds behind at that probe; None: not fit to read from
        self._probed_at = -math.inf
        self._samples: collections.deque[tuple[float, int]] = collections.deque(maxlen=STANDBY_SAMPLES)
        self._probing = asyncio.Lock()
        self._written: TTLCache[tuple[str, str], int] = TTLCache(maxsize=writers, ttl=max(60.0, 6 * max_lag))

    def needs(self, tenant_key: str, principal: str | None) -> int | None:
        """The WAL position `principal`'s reads of the tenant need: where its last commit ended, if recent."""
        return None if principal is None else self._written.get((tenant_key, principal))

    async def committed(self, conn: asyncpg.Connection, tenant_key: str, principal: str) -> None:
        """Record where the commit just made on `conn` (the primary) ends in the WAL (the insert
        position: with asynchronous commit the write position may not have passed it yet)."""
        self._written[(tenant_key, principal)] = lsn(await conn.fetchval("SELECT pg_current_wal_insert_lsn()::text"))

    async def fits(self, needs: int | None) -> bool:
        """Whether a read may go to the standby: it answers, streams, is at most `max_lag` seconds
        behind, and has replayed `needs` (the reader's last commit)."""
        now = time.monotonic()
        down = self.replica.down_since
        if down is not None and now - down < STANDBY_RETRY_SECONDS:
            return False
        if now - self._probed_at > STANDBY_PROBE_SECONDS:
            async with self._probing:
                if time.monotonic() - self._probed_at > STANDBY_PROBE_SECONDS:
                    await self.probe()
        lag = self._lag
        return lag is not None and lag <= self.max_lag and (needs is None or self._replayed >= needs)

    async def probe(self) -> None:
        """The primary's position now (flushed: all a standby can have), then how far the standby
        has replayed. Its lag is the time since the primary was where the standby is: the age of the
        newest sample it has reached (0 if it has reached this one; unknown, so not read from, if it
        has reached none kept). No privilege is needed, and a standby that stopped receiving shows
        its lag as it grows."""
        self._lag = None
        try:
            with deadline(STANDBY_PROBE_BUDGET):
                async with self.primary.connection() as lease:
                    self._samples.append(
                        (time.monotonic(), lsn(await lease.conn.fetchval("SELECT pg_current_wal_flush_lsn()::text")))
                    )
                async with self.replica.connection() as lease:
                    replayed = await lease.conn.fetchval("SELECT pg_last_wal_replay_lsn()::text")
        except Unavailable:
            return  # the one that failed has its down_since set: the standby is left alone for a while
        except asyncpg.PostgresError as exc:
            logger.warning("standby of cell %s refused its probe: %s", self.primary.name, type(exc).__name__)
            self.replica.down_since = time.monotonic()
            return
        finally:
            self._probed_at = time.monotonic()
        if replayed is None:  # not a standby (or not in recovery any more)
            return
        self._replayed = lsn(replayed)
        reached = [at for at, position in self._samples if position <= self._replayed]
        if reached:
            self._lag = 0.0 if reached[-1] == self._samples[-1][0] else time.monotonic() - reached[-1]
