"""Revoked grants, as each replica knows them: access tokens are self-contained JWTs, so a
revoked family's tokens are refused by looking its id (`sid`) up here. The list holds only
families revoked within an access token's lifetime and is read again every few seconds, so a
revocation reaches every replica within `every` seconds at the cost of one small query."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta

import asyncpg

from app.store import oauth
from app.store.database import Database

logger = logging.getLogger(__name__)


class Revocations:
    def __init__(self, db: Database, *, lifetime: timedelta, every: float = 5) -> None:
        self._db = db
        self._lifetime = lifetime
        self._every = every
        self._revoked: frozenset[str] = frozenset()

    def __contains__(self, family_id: object) -> bool:
        return family_id in self._revoked

    async def refresh(self) -> None:
        since = datetime.now(UTC) - self._lifetime - timedelta(minutes=1)
        self._revoked = frozenset(await self._db.run(oauth.revoked_since, since))

    async def run(self) -> None:
        while True:
            try:
                await self.refresh()
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                logger.warning("could not read revoked grants: %s", type(exc).__name__)
            await asyncio.sleep(self._every)
