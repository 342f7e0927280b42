"""People who sign in at the built-in authorization server: users, their upstream identities, the
tenants they belong to, and their browser sessions. Not tenant data: reached outside any tenant
context, by the run-time role (sign-in) and the owner (the `engram user` / `member` commands)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import asyncpg

from app.errors import EngramError
from app.store.database import timed

ROLES = ("reader", "writer", "admin")


@dataclass(frozen=True, slots=True)
class User:
    id: str
    username: str
    display_name: str
    password_hash: str | None
    disabled: bool

    @classmethod
    def of(cls, row: asyncpg.Record) -> User:
        return cls(
            str(row["id"]), row["username"], row["display_name"], row["password_hash"], row["disabled_at"] is not None
        )


@dataclass(frozen=True, slots=True)
class Membership:
    tenant: str
    role: str


_USER = "SELECT id, username, display_name, password_hash, disabled_at FROM engram.users"


@timed
async def by_username(conn: asyncpg.Connection, username: str) -> User | None:
    row = await conn.fetchrow(f"{_USER} WHERE username = $1", username)
    return User.of(row) if row else None


@timed
async def by_id(conn: asyncpg.Connection, user_id: str) -> User | None:
    row = await conn.fetchrow(f"{_USER} WHERE id = $1::uuid", user_id)
    return User.of(row) if row else None


@timed
async def by_identity(conn: asyncpg.Connection, provider: str, subject: str) -> User | None:
    row = await conn.fetchrow(
        "SELECT u.id, u.username, u.display_name, u.password_hash, u.disabled_at FROM engram.user_identities i"
        " JOIN engram.users u ON u.id = i.user_id WHERE i.provider = $1 AND i.subject = $2",
        provider,
        subject,
    )
    return User.of(row) if row else None


@timed
async def create(conn: asyncpg.Connection, username: str, display_name: str, password_hash: str | None) -> User:
    try:
        row = await conn.fetchrow(
            "INSERT INTO engram.users (username, display_name, password_hash) VALUES ($1, $2, $3)"
            " RETURNING id, username, display_name, password_hash, disabled_at",
            username,
            display_name,
            password_hash,
        )
    except asyncpg.UniqueViolationError:
        raise EngramError("conflict", f"user {username!r} exists already") from None
    except asyncpg.CheckViolationError:
        raise EngramError("invalid", "a username is 1-100 of a-z 0-9 . _ @ + - (lower case)") from None
    assert row is not None
    return User.of(row)


@timed
async def create_linked(
    conn: asyncpg.Connection, username: str, display_name: str, provider: str, subject: str
) -> User:
    """A user who signs in through an upstream provider, with that identity linked."""
    async with conn.transaction():
        user = await create(conn, username, display_name, None)
        await conn.execute(
            "INSERT INTO engram.user_identities (provider, subject, user_id) VALUES ($1, $2, $3::uuid)",
            provider,
            subject,
            user.id,
        )
    return user


@timed
async def set_password(conn: asyncpg.Connection, username: str, password_hash: str) -> None:
    await _one(conn, "UPDATE engram.users SET password_hash = $2 WHERE username = $1", username, password_hash)


@timed
async def change_password(
    conn: asyncpg.Connection,
    user_id: str,
    old_hash: str,
    new_hash: str,
    keep_session: bytes | None,
    keep_grant: str | None,
) -> tuple[int, int] | None:
    """A person's own password change, in one transaction: the new hash, if the stored one is still
    `old_hash` (else None, nothing changed); then every other browser session of theirs ends and every
    other grant is revoked (`keep_session`, `keep_grant`: the ones the change was made through).
    (sessions ended, grants revoked)."""
    async with conn.transaction():
        changed = await conn.execute(
            "UPDATE engram.users SET password_hash = $3"
            " WHERE id = $1::uuid AND password_hash = $2 AND disabled_at IS NULL",
            user_id,
            old_hash,
            new_hash,
        )
        if changed.endswith(" 0"):
            return None
        sessions = await conn.execute(
            "DELETE FROM engram.web_sessions WHERE user_id = $1::uuid AND id_hash IS DISTINCT FROM $2",
            user_id,
            keep_session,
        )
        grants = await conn.execute(
            "UPDATE engram.oauth_families SET revoked_at = now(), revoked_why = 'password changed'"
            " WHERE user_id = $1::uuid AND revoked_at IS NULL AND id IS DISTINCT FROM $2::uuid",
            user_id,
            keep_grant,
        )
    return int(sessions.rsplit(" ", 1)[-1]), int(grants.rsplit(" ", 1)[-1])


@timed
async def set_disabled(conn: asyncpg.Connection, username: str, disabled: bool) -> None:
    await _one(
        conn,
        "UPDATE engram.users SET disabled_at = CASE WHEN $2 THEN coalesce(disabled_at, now()) END WHERE username = $1",
        username,
        disabled,
    )


@timed
async def list_users(conn: asyncpg.Connection) -> list[tuple[User, datetime]]:
    rows = await conn.fetch(
        "SELECT id, username, display_name, password_hash, disabled_at, created_at FROM engram.users ORDER BY username"
    )
    return [(User.of(r), r["created_at"]) for r in rows]


@timed
async def memberships(conn: asyncpg.Connection, user_id: str) -> list[Membership]:
    rows = await conn.fetch(
        "SELECT tenant_key, role FROM engram.memberships WHERE user_id = $1::uuid ORDER BY tenant_key", user_id
    )
    return [Membership(r["tenant_key"], r["role"]) for r in rows]


@timed
async def add_membership(conn: asyncpg.Connection, user_id: str, tenant: str, role: str) -> None:
    try:
        await conn.execute(
            "INSERT INTO engram.memberships (user_id, tenant_key, role) VALUES ($1::uuid, $2, $3)"
            " ON CONFLICT (user_id, tenant_key) DO UPDATE SET role = excluded.role",
            user_id,
            tenant,
            role,
        )
    except asyncpg.CheckViolationError:
        raise EngramError(
            "invalid", "a tenant id is 1-200 letters, digits and . _ : @ | -; roles: " + ", ".join(ROLES)
        ) from None


@timed
async def remove_membership(conn: asyncpg.Connection, username: str, tenant: str) -> None:
    await _one(
        conn,
        "DELETE FROM engram.memberships m USING engram.users u"
        " WHERE m.user_id = u.id AND u.username = $1 AND m.tenant_key = $2",
        username,
        tenant,
    )


@timed
async def list_memberships(conn: asyncpg.Connection, tenant: str | None) -> list[tuple[str, str, str]]:
    rows = await conn.fetch(
        "SELECT u.username, m.tenant_key, m.role FROM engram.memberships m JOIN engram.users u ON u.id = m.user_id"
        " WHERE $1::text IS NULL OR m.tenant_key = $1 ORDER BY m.tenant_key, u.username",
        tenant,
    )
    return [(r["username"], r["tenant_key"], r["role"]) for r in rows]


@timed
async def open_session(conn: asyncpg.Connection, id_hash: bytes, user_id: str, ttl: timedelta) -> None:
    await conn.execute(
        "INSERT INTO engram.web_sessions (id_hash, user_id, expires_at) VALUES ($1, $2::uuid, now() + $3)",
        id_hash,
        user_id,
        ttl,
    )


@timed
async def session_user(conn: asyncpg.Connection, id_hash: bytes) -> User | None:
    """The signed-in user of a live session, if the user is still enabled."""
    row = await conn.fetchrow(
        "SELECT u.id, u.username, u.display_name, u.password_hash, u.disabled_at FROM engram.web_sessions s"
        " JOIN engram.users u ON u.id = s.user_id"
        " WHERE s.id_hash = $1 AND s.expires_at > now() AND u.disabled_at IS NULL",
        id_hash,
    )
    return User.of(row) if row else None


@timed
async def close_session(conn: asyncpg.Connection, id_hash: bytes) -> None:
    await conn.execute("DELETE FROM engram.web_sessions WHERE id_hash = $1", id_hash)


@timed
async def close_sessions_of(conn: asyncpg.Connection, user_id: str) -> None:
    await conn.execute("DELETE FROM engram.web_sessions WHERE user_id = $1::uuid", user_id)


async def _one(conn: asyncpg.Connection, query: str, *args: object) -> None:
    if (await conn.execute(query, *args)).endswith(" 0"):
        raise EngramError("not_found", f"no such user or membership: {args[0]!r}")
