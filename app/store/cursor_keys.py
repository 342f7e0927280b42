"""Rotation of the cursor signing keys (`engram cursor-key rotate`), on an owner connection."""

from __future__ import annotations

import secrets

import asyncpg

from app.store.database import CURSOR_KEY, timed


@timed
async def rotate(conn: asyncpg.Connection, retire_after_seconds: float) -> tuple[str, list[str]]:
    """Add a new signing key; remove the keys whose successor was added more than `retire_after_seconds` ago.

    Returns the new key's id and the ids removed. A removed key's cursors have all expired by then,
    so nothing a client holds stops working.
    """
    key_id = f"cursor-{secrets.token_hex(4)}"
    async with conn.transaction():
        await conn.execute(
            "INSERT INTO engram.server_secrets (name, value) VALUES ($1, $2)", key_id, secrets.token_bytes(32)
        )
        retired = await conn.fetch(
            f"""
            DELETE FROM engram.server_secrets k
            WHERE k.name ~ '{CURSOR_KEY}' AND EXISTS (
                SELECT 1 FROM engram.server_secrets n
                WHERE n.name ~ '{CURSOR_KEY}' AND n.created_at > k.created_at
                  AND n.created_at < now() - make_interval(secs => $1))
            RETURNING k.name
            """,
            retire_after_seconds,
        )
    return key_id, [r[0] for r in retired]
