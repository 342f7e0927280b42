"""Rate limits for the authorization server's endpoints, counted in PostgreSQL so that every
replica shares them: fixed windows, one upsert per counted request. These endpoints see a few
requests per sign-in, so a database round trip is cheap beside what they protect."""

from __future__ import annotations

import time

from app.store import oauth
from app.store.database import Database


class RateLimiter:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def hit(self, bucket: str, limit: int, window: int) -> int | None:
        """Counts a request; None when it is within `limit` per `window` seconds, else the seconds to wait."""
        start = int(time.time()) // window * window
        if await self._db.run(oauth.hit, bucket, start) <= limit:
            return None
        return start + window - int(time.time())

    async def over(self, bucket: str, limit: int, window: int) -> int | None:
        """Like `hit`, without counting: for limits counted only on failure."""
        start = int(time.time()) // window * window
        if await self._db.run(oauth.hits, bucket, start) < limit:
            return None
        return start + window - int(time.time())
