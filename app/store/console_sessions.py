"""The console's browser sessions, shared by replicas: rows found by a hash of the cookie, holding
a sealed blob only the cookie opens, a version that orders token refreshes, and the one-line notice
shown after a change. Not tenant data: reached outside any tenant context."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import asyncpg

from app.store.database import timed


@dataclass(frozen=True, slots=True)
class SessionRow:
    sealed: str
    version: int
    notice: str


@timed
async def open_session(conn: asyncpg.Connection, id_hash: bytes, sealed: str, ttl: timedelta) -> None:
    await conn.execute(
        "INSERT INTO engram.console_sessions (id_hash, sealed, expires_at) VALUES ($1, $2, now() + $3)",
        id_hash,
        sealed,
        ttl,
    )


@timed
async def session(conn: asyncpg.Connection, id_hash: bytes) -> SessionRow | None:
    row = await conn.fetchrow(
        "SELECT sealed, version, notice FROM engram.console_sessions WHERE id_hash = $1 AND expires_at > now()",
        id_hash,
    )
    return SessionRow(row["sealed"], row["version"], row["notice"]) if row else None


@timed
async def claim_refresh(conn: asyncpg.Connection, id_hash: bytes, version: int, hold: timedelta) -> bool:
    """True for the one request that may now spend the session's refresh token."""
    done = await conn.execute(
        "UPDATE engram.console_sessions SET refreshing_until = now() + $3"
        " WHERE id_hash = $1 AND version = $2 AND (refreshing_until IS NULL OR refreshing_until <= now())",
        id_hash,
        version,
        hold,
    )
    return done.endswith(" 1")


@timed
async def renew(conn: asyncpg.Connection, id_hash: bytes, version: int, sealed: str) -> bool:
    """Stores refreshed tokens over `version`, ending the claim; False if the session moved on."""
    done = await conn.execute(
        "UPDATE engram.console_sessions SET sealed = $3, version = version + 1, refreshing_until = NULL"
        " WHERE id_hash = $1 AND version = $2",
        id_hash,
        version,
        sealed,
    )
    return done.endswith(" 1")


@timed
async def set_notice(conn: asyncpg.Connection, id_hash: bytes, notice: str) -> None:
    await conn.execute("UPDATE engram.console_sessions SET notice = $2 WHERE id_hash = $1", id_hash, notice)


@timed
async def clear_notice(conn: asyncpg.Connection, id_hash: bytes, notice: str) -> None:
    """Clears the notice just shown, unless a newer one replaced it meanwhile."""
    await conn.execute(
        "UPDATE engram.console_sessions SET notice = '' WHERE id_hash = $1 AND notice = $2", id_hash, notice
    )


@timed
async def close_session(conn: asyncpg.Connection, id_hash: bytes) -> None:
    await conn.execute("DELETE FROM engram.console_sessions WHERE id_hash = $1", id_hash)
