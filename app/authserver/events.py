"""What happened at the authorization server, for operators: a metric per outcome and a row in
`engram.auth_events` (never a secret)."""

from __future__ import annotations

import logging
from typing import Any

import asyncpg

from app.observability import metrics
from app.observability.context import REQUEST_ID
from app.store import oauth
from app.store.database import Database

logger = logging.getLogger(__name__)


class Events:
    """Each outcome of a flow: a metric, an `auth_events` row, and no secrets anywhere."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def __call__(self, flow: str, outcome: str, **fields: Any) -> None:
        metrics.OAUTH_EVENTS.labels(flow, outcome).inc()
        try:
            await self._db.run(oauth.event, flow, outcome, request_id=REQUEST_ID.get(), **fields)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            logger.warning("could not record the %s event: %s", flow, type(exc).__name__)
