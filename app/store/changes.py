"""Changes announced between servers: a write's transaction announces what it changed (delivered
by PostgreSQL on commit, to every server listening on the database), and each server's feed
passes the announcements on. An existing engine, no broker to run (docs/tools.md, "Live memory")."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import asyncpg
import orjson

from app.store.database import Tx, timed
from app.store.errors import is_outage

logger = logging.getLogger("engram.changes")

CHANNEL = "engram_changes"
PING_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class Change:
    """What one committed write changed: its tenant (by key) and the names of the entities it
    touched; `names` None means anything may have changed (too many to name, or announcements may
    have been missed while the feed was reconnecting)."""

    tenant: str | None  # None: every tenant (after a gap in the feed)
    names: tuple[str, ...] | None
    session: str | None = None  # not a change of the memory: this session's subscriptions changed


@timed
async def announce(tx: Tx, entity_ids: Sequence[str]) -> None:
    """Announce, on commit, the entities this transaction touched (for the pinned tenant only)."""
    await tx.execute("SELECT engram.announce_changes($1::uuid[])", list(dict.fromkeys(entity_ids)))


def decode(payload: str) -> Change | None:
    """An announcement, or None for a payload not of our making (it is read, never trusted further)."""
    try:
        data = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("t"), str):
        return None
    if isinstance(data.get("s"), str):
        return Change(data["t"], (), data["s"])
    names = data.get("n")
    if names is not None and not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
        return None
    return Change(data["t"], None if names is None else tuple(names))


class Feed:
    """One connection of its own (not the pool's: it stays open) listening for announcements, opened
    again after it fails; after a gap it reports `Change(None, None)`, since announcements made
    meanwhile were lost (NOTIFY keeps nothing for a listener that was not there)."""

    def __init__(self, dsn: str, deliver: Callable[[Change], None], *, retry_seconds: float = 1.0) -> None:
        self._dsn = dsn
        self._deliver = deliver
        self._retry = retry_seconds
        self._task: asyncio.Task[None] | None = None
        self.connected = asyncio.Event()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="engram-change-feed")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def _received(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        change = decode(payload)
        if change is not None:
            self._deliver(change)

    async def _run(self) -> None:
        first = True
        while True:
            try:
                conn = await asyncpg.connect(self._dsn, timeout=10, server_settings={"application_name": "engram-feed"})
            except Exception as exc:  # any failure to connect: try again
                if not is_outage(exc):
                    logger.warning("change feed cannot connect: %s", type(exc).__name__)
                await asyncio.sleep(self._retry)
                continue
            try:
                await self._listen(conn, gap=not first)
            except Exception as exc:  # the connection failed: open another
                logger.warning("change feed lost: %s", type(exc).__name__)
            finally:
                self.connected.clear()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(conn.close(), 2)
            first = False
            await asyncio.sleep(self._retry)

    async def _listen(self, conn: asyncpg.Connection, *, gap: bool) -> None:
        """Until the connection ends: announcements as they come, and a check now and then for a
        server gone without a word."""
        lost = asyncio.Event()
        conn.add_termination_listener(lambda _c: lost.set())
        await conn.add_listener(CHANNEL, self._received)
        if gap:
            self._deliver(Change(None, None))  # what was announced meanwhile is lost
        self.connected.set()
        while not lost.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(lost.wait(), PING_SECONDS)
            if not lost.is_set():
                await conn.fetchval("SELECT 1", timeout=PING_SECONDS / 2)
