"""resources/subscribe (protocol 2025-11-25): the URIs each client session follows, kept in the
database so that any server can hold the session's notification stream (migration 0018)."""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg
import orjson

from app.store.changes import CHANNEL
from app.store.database import timed

MAX_URIS = 100  # per session
SWEEP_AFTER = "1 day"


class TooMany(Exception):
    """The session already follows MAX_URIS resources."""


@timed
async def add(
    conn: asyncpg.Connection, session: str, tenant_id: str, tenant_key: str, principal: str, uris: Sequence[str]
) -> None:
    """Follow `uris` in `session` (its owner: `principal` of the tenant), and tell every server."""
    async with conn.transaction():
        await conn.execute(
            "INSERT INTO engram.resource_subscriptions (session_id, tenant_id, principal, uri)"
            " SELECT $1, $2, $3, u FROM unnest($4::text[]) AS u"
            " ON CONFLICT (session_id, principal, uri) DO UPDATE SET created_at = now()",
            session,
            tenant_id,
            principal,
            list(uris),
        )
        count = await conn.fetchval(
            "SELECT count(*) FROM engram.resource_subscriptions WHERE session_id = $1 AND principal = $2",
            session,
            principal,
        )
        if count > MAX_URIS:
            raise TooMany
        await _announce(conn, tenant_key, session)


@timed
async def remove(conn: asyncpg.Connection, session: str, tenant_key: str, principal: str, uris: Sequence[str]) -> None:
    async with conn.transaction():
        await conn.execute(
            "DELETE FROM engram.resource_subscriptions"
            " WHERE session_id = $1 AND principal = $2 AND uri = ANY($3::text[])",
            session,
            principal,
            list(uris),
        )
        await _announce(conn, tenant_key, session)


@timed
async def followed(conn: asyncpg.Connection, session: str, principal: str) -> frozenset[str]:
    """The URIs `session` follows, if it is `principal`'s (another principal's session follows nothing)."""
    rows = await conn.fetch(
        "SELECT uri FROM engram.resource_subscriptions WHERE session_id = $1 AND principal = $2", session, principal
    )
    return frozenset(r[0] for r in rows)


@timed
async def sweep(conn: asyncpg.Connection) -> int:
    """Forget subscriptions not renewed for a day (a client that went away without unsubscribing)."""
    status = await conn.execute(
        f"DELETE FROM engram.resource_subscriptions WHERE created_at < now() - interval '{SWEEP_AFTER}'"
    )
    return int(status.split()[-1])


async def _announce(conn: asyncpg.Connection, tenant_key: str, session: str) -> None:
    payload = orjson.dumps({"t": tenant_key, "s": session}).decode()
    await conn.execute("SELECT pg_notify($1, $2)", CHANNEL, payload)
