"""What hooks keep per tenant beside the episodes they write: each session's turn count, the facts
a session was already given, and the tenant's own hook switches (migration 0031)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime

import asyncpg

from app.store.database import Tx, timed


@dataclass(frozen=True, slots=True)
class HookOverrides:
    """A tenant's own hook settings; None: the server's default."""

    capture: bool | None
    events: list[str] | None
    deny: list[str] | None
    prompt_tokens: int | None
    start_tokens: int | None
    min_score: float | None
    private: bool | None


# The overridable settings, by column; the only identifiers set_overrides builds into its query.
COLUMNS = tuple(f.name for f in fields(HookOverrides))


@dataclass(frozen=True, slots=True)
class SessionTurn:
    """Where a session stands: prompts so far, the last one's digest, and whether it was answered."""

    turns: int
    last_user: bytes | None
    answered: bool


@dataclass(frozen=True, slots=True)
class HookEpisode:
    """An episode a hook kept, for the console: its session, turn and speaker are in `source`."""

    id: int
    content: str
    at: datetime
    source: str


@timed
async def overrides(tx: Tx) -> HookOverrides | None:
    row = await tx.fetchrow(f"SELECT {', '.join(COLUMNS)} FROM {{s}}.hook_settings")
    return None if row is None else HookOverrides(*row)


@timed
async def set_overrides(conn: asyncpg.Connection, schema: str, values: Mapping[str, object]) -> None:
    """Set some of a tenant's hook settings (None: back to the server's default), the others kept,
    on an owner connection (`engram hooks set`); `schema` is a checked tenant schema name."""
    columns = [c for c in COLUMNS if c in values]
    if columns:
        await conn.execute(_upsert(schema, columns), *(values[c] for c in columns))


@timed
async def set_own(tx: Tx, values: Mapping[str, object]) -> None:
    """The same in the tenant's own transaction (its administrators, in the console)."""
    columns = [c for c in COLUMNS if c in values]
    if columns:
        await tx.execute(_upsert("{s}", columns), *(values[c] for c in columns))
        tx.affected.append("hook-settings:" + ",".join(columns))  # the audit row names what changed


def _upsert(schema: str, columns: Sequence[str]) -> str:
    given = ", ".join(f"${n}" for n in range(1, len(columns) + 1))
    update = ", ".join(f"{c} = excluded.{c}" for c in columns)
    return (
        f"INSERT INTO {schema}.hook_settings ({', '.join(columns)}) VALUES ({given})"
        f" ON CONFLICT (one) DO UPDATE SET {update}, updated_at = now()"
    )


@timed
async def session_turn(tx: Tx, session: str) -> SessionTurn:
    """The session's state, its row made if new and locked to the end of the transaction: one
    capture of a session at a time, so two deliveries of one event agree on its turn."""
    row = await tx.fetchrow(
        """
        INSERT INTO {s}.hook_sessions AS h (session) VALUES ($1)
        ON CONFLICT (session) DO UPDATE SET updated_at = now()
        RETURNING h.turns, h.last_user, h.answered
        """,
        session,
    )
    assert row is not None
    return SessionTurn(row[0], row[1], row[2])


@timed
async def set_turn(tx: Tx, session: str, turns: int, last_user: bytes | None, answered: bool) -> None:
    await tx.execute(
        "UPDATE {s}.hook_sessions SET turns = $2, last_user = $3, answered = $4, updated_at = now() WHERE session = $1",
        session,
        turns,
        last_user,
        answered,
    )


@timed
async def captured(tx: Tx, keys: Sequence[str]) -> set[str]:
    """Those of these capture keys the tenant's episodes hold already."""
    rows = await tx.fetch("SELECT capture_key FROM {s}.episodes WHERE capture_key = ANY($1::text[])", list(keys))
    return {r[0] for r in rows}


@timed
async def set_capture_keys(tx: Tx, ids: Sequence[int], keys: Sequence[str]) -> None:
    await tx.execute(
        "UPDATE {s}.episodes p SET capture_key = k.key FROM unnest($1::bigint[], $2::text[]) AS k(id, key)"
        " WHERE p.id = k.id",
        list(ids),
        list(keys),
    )


@timed
async def shown(tx: Tx, session: str, facts: Sequence[int]) -> set[int]:
    """Those of these facts the session was given already."""
    rows = await tx.fetch(
        "SELECT fact FROM {s}.hook_shown WHERE session = $1 AND fact = ANY($2::bigint[])", session, list(facts)
    )
    return {r[0] for r in rows}


@timed
async def mark_shown(tx: Tx, session: str, facts: Sequence[int]) -> None:
    await tx.execute(
        "INSERT INTO {s}.hook_shown (session, fact) SELECT $1, f FROM unnest($2::bigint[]) AS f ON CONFLICT DO NOTHING",
        session,
        list(facts),
    )


@timed
async def forget_shown(tx: Tx, session: str) -> None:
    await tx.execute("DELETE FROM {s}.hook_shown WHERE session = $1", session)


@timed
async def forget_old(tx: Tx, days: float, limit: int) -> int:
    """Drop up to `limit` sessions (and what they were shown) idle for `days`: bounded work per call."""
    rows = await tx.fetch(
        """
        WITH old AS (SELECT session FROM {s}.hook_sessions
                     WHERE updated_at < now() - make_interval(secs => 86400 * $1) LIMIT $2),
             gone_shown AS (DELETE FROM {s}.hook_shown h USING old WHERE h.session = old.session)
        DELETE FROM {s}.hook_sessions h USING old WHERE h.session = old.session RETURNING 1
        """,
        days,
        limit,
    )
    return len(rows)


@timed
async def episodes(tx: Tx, prefix: str, session: str | None, limit: int) -> list[HookEpisode]:
    """The newest episodes hooks kept (source `prefix` + session + `:`), of one session or all."""
    start = prefix + (f"{session}:" if session is not None else "")
    rows = await tx.fetch(
        """
        SELECT p.id, p.content, p.at, p.source FROM {s}.episodes p
        WHERE p.capture_key IS NOT NULL AND left(p.source, length($1)) = $1
        ORDER BY p.id DESC LIMIT $2
        """,
        start,
        limit,
    )
    return [HookEpisode(*r) for r in rows]


@timed
async def captured_ids(tx: Tx, ids: Sequence[int]) -> set[int]:
    """Those of these episodes a hook kept (they have a capture key, which only hooks set)."""
    rows = await tx.fetch(
        "SELECT id FROM {s}.episodes WHERE id = ANY($1::bigint[]) AND capture_key IS NOT NULL", list(ids)
    )
    return {r[0] for r in rows}
