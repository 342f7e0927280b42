"""What the built-in authorization server remembers: clients, pending authorization requests,
grants (families) with their codes and refresh tokens, consents, signing keys, rate windows and
its event log. Shared by every replica; credentials arrive here already hashed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from app.store.database import timed


@dataclass(frozen=True, slots=True)
class Client:
    client_id: str
    kind: str
    metadata: dict[str, Any]
    secret_hash: bytes | None


@dataclass(frozen=True, slots=True)
class Family:
    id: str
    client_id: str
    user_id: str
    tenant: str
    scopes: list[str]
    resource: str
    revoked: bool


@dataclass(frozen=True, slots=True)
class Code:
    family: Family
    code_challenge: str
    redirect_uri: str
    redirect_uri_explicit: bool
    expires_at: datetime
    used: bool


@dataclass(frozen=True, slots=True)
class Refresh:
    family: Family
    expires_at: datetime
    used: bool


@dataclass(frozen=True, slots=True)
class SigningKey:
    kid: str
    private_jwk: dict[str, Any]
    activates_at: datetime
    retires_at: datetime | None


def _family(row: asyncpg.Record) -> Family:
    return Family(
        str(row["family_id"]),
        row["client_id"],
        str(row["user_id"]),
        row["tenant_key"],
        list(row["scopes"]),
        row["resource"],
        row["revoked_at"] is not None,
    )


_FAMILY = "f.id AS family_id, f.client_id, f.user_id, f.tenant_key, f.scopes, f.resource, f.revoked_at"

# --- clients ------------------------------------------------------------------------------------


@timed
async def client(conn: asyncpg.Connection, client_id: str) -> Client | None:
    row = await conn.fetchrow(
        "SELECT client_id, kind, metadata, secret_hash FROM engram.oauth_clients WHERE client_id = $1", client_id
    )
    return Client(row["client_id"], row["kind"], row["metadata"], row["secret_hash"]) if row else None


@timed
async def add_client(
    conn: asyncpg.Connection, client_id: str, kind: str, metadata: dict[str, Any], secret_hash: bytes | None
) -> None:
    await conn.execute(
        "INSERT INTO engram.oauth_clients (client_id, kind, metadata, secret_hash) VALUES ($1, $2, $3, $4)",
        client_id,
        kind,
        metadata,
        secret_hash,
    )


@timed
async def list_clients(conn: asyncpg.Connection) -> list[tuple[Client, datetime, datetime | None]]:
    rows = await conn.fetch(
        "SELECT client_id, kind, metadata, secret_hash, created_at, last_used_at FROM engram.oauth_clients"
        " ORDER BY created_at"
    )
    return [
        (Client(r["client_id"], r["kind"], r["metadata"], r["secret_hash"]), r["created_at"], r["last_used_at"])
        for r in rows
    ]


@timed
async def remove_client(conn: asyncpg.Connection, client_id: str) -> bool:
    return not (await conn.execute("DELETE FROM engram.oauth_clients WHERE client_id = $1", client_id)).endswith(" 0")


# --- authorization requests ---------------------------------------------------------------------


@timed
async def save_request(
    conn: asyncpg.Connection, id_hash: bytes, client_id: str, params: dict[str, Any], ttl: timedelta
) -> None:
    await conn.execute(
        "INSERT INTO engram.oauth_requests (id_hash, client_id, params, expires_at) VALUES ($1, $2, $3, now() + $4)",
        id_hash,
        client_id,
        params,
        ttl,
    )


@timed
async def pending_request(conn: asyncpg.Connection, id_hash: bytes) -> tuple[str, dict[str, Any]] | None:
    row = await conn.fetchrow(
        "SELECT client_id, params FROM engram.oauth_requests WHERE id_hash = $1 AND expires_at > now()", id_hash
    )
    return (row["client_id"], row["params"]) if row else None


@timed
async def take_request(conn: asyncpg.Connection, id_hash: bytes) -> tuple[str, dict[str, Any]] | None:
    """The pending request, removed in the same statement: a request is answered once."""
    row = await conn.fetchrow(
        "DELETE FROM engram.oauth_requests WHERE id_hash = $1 AND expires_at > now() RETURNING client_id, params",
        id_hash,
    )
    return (row["client_id"], row["params"]) if row else None


# --- grants: families, codes, refresh tokens ----------------------------------------------------


@timed
async def grant(
    conn: asyncpg.Connection,
    *,
    client_id: str,
    user_id: str,
    tenant: str,
    scopes: Sequence[str],
    resource: str,
    code_hash: bytes,
    code_challenge: str,
    redirect_uri: str,
    redirect_uri_explicit: bool,
    code_ttl: timedelta,
) -> str:
    """A new family and its authorization code, in one transaction."""
    async with conn.transaction():
        family_id = await conn.fetchval(
            "INSERT INTO engram.oauth_families (client_id, user_id, tenant_key, scopes, resource)"
            " VALUES ($1, $2::uuid, $3, $4, $5) RETURNING id::text",
            client_id,
            user_id,
            tenant,
            list(scopes),
            resource,
        )
        await conn.execute(
            "INSERT INTO engram.oauth_codes (code_hash, family_id, code_challenge, redirect_uri,"
            " redirect_uri_explicit, expires_at) VALUES ($1, $2::uuid, $3, $4, $5, now() + $6)",
            code_hash,
            family_id,
            code_challenge,
            redirect_uri,
            redirect_uri_explicit,
            code_ttl,
        )
        await conn.execute("UPDATE engram.oauth_clients SET last_used_at = now() WHERE client_id = $1", client_id)
    return str(family_id)


@timed
async def code(conn: asyncpg.Connection, code_hash: bytes) -> Code | None:
    row = await conn.fetchrow(
        f"SELECT {_FAMILY}, c.code_challenge, c.redirect_uri, c.redirect_uri_explicit, c.expires_at, c.used_at"
        " FROM engram.oauth_codes c JOIN engram.oauth_families f ON f.id = c.family_id WHERE c.code_hash = $1",
        code_hash,
    )
    if row is None:
        return None
    return Code(
        _family(row),
        row["code_challenge"],
        row["redirect_uri"],
        row["redirect_uri_explicit"],
        row["expires_at"],
        row["used_at"] is not None,
    )


@timed
async def use_code(conn: asyncpg.Connection, code_hash: bytes) -> bool:
    """Marks a code used; False when it was used before (a replay)."""
    done = await conn.execute(
        "UPDATE engram.oauth_codes SET used_at = now() WHERE code_hash = $1 AND used_at IS NULL", code_hash
    )
    return not done.endswith(" 0")


@timed
async def refresh(conn: asyncpg.Connection, token_hash: bytes) -> Refresh | None:
    row = await conn.fetchrow(
        f"SELECT {_FAMILY}, r.expires_at, r.used_at FROM engram.oauth_refresh_tokens r"
        " JOIN engram.oauth_families f ON f.id = r.family_id WHERE r.token_hash = $1",
        token_hash,
    )
    return Refresh(_family(row), row["expires_at"], row["used_at"] is not None) if row else None


@timed
async def rotate_refresh(
    conn: asyncpg.Connection, old_hash: bytes | None, new_hash: bytes, family_id: str, ttl: timedelta
) -> Family | None:
    """Stores a family's next refresh token, marking the one it replaces used; returns the family.

    None (and nothing stored) when `old_hash` was used already or the family is revoked: the
    caller treats that as a replay.
    """
    async with conn.transaction():
        if old_hash is not None:
            done = await conn.execute(
                "UPDATE engram.oauth_refresh_tokens SET used_at = now() WHERE token_hash = $1 AND used_at IS NULL",
                old_hash,
            )
            if done.endswith(" 0"):
                return None
        row = await conn.fetchrow(
            f"SELECT {_FAMILY} FROM engram.oauth_families f WHERE f.id = $1::uuid FOR UPDATE", family_id
        )
        if row is None or row["revoked_at"] is not None:
            return None
        await conn.execute(
            "INSERT INTO engram.oauth_refresh_tokens (token_hash, family_id, expires_at)"
            " VALUES ($1, $2::uuid, now() + $3)",
            new_hash,
            family_id,
            ttl,
        )
    return _family(row)


@timed
async def revoke_family(conn: asyncpg.Connection, family_id: str, why: str) -> None:
    await conn.execute(
        "UPDATE engram.oauth_families SET revoked_at = now(), revoked_why = $2"
        " WHERE id = $1::uuid AND revoked_at IS NULL",
        family_id,
        why,
    )


@timed
async def revoke_families(conn: asyncpg.Connection, *, user_id: str | None = None, client_id: str | None = None) -> int:
    """Revokes every live grant of a user, of a client, or of both together."""
    done = await conn.execute(
        "UPDATE engram.oauth_families SET revoked_at = now(), revoked_why = 'revoked'"
        " WHERE revoked_at IS NULL AND ($1::uuid IS NULL OR user_id = $1::uuid)"
        " AND ($2::text IS NULL OR client_id = $2)",
        user_id,
        client_id,
    )
    return int(done.rsplit(" ", 1)[-1])


@timed
async def revoked_since(conn: asyncpg.Connection, since: datetime) -> list[str]:
    """Families revoked after `since`: their access tokens may still be within their lifetime."""
    rows = await conn.fetch("SELECT id::text FROM engram.oauth_families WHERE revoked_at > $1", since)
    return [r[0] for r in rows]


@dataclass(frozen=True, slots=True)
class LiveGrant:
    """A grant its client can still use: a usable refresh token or code, or an access token within its
    lifetime. `last_issued_at` is when it last got tokens (each issue stores a new refresh token)."""

    id: str
    client_id: str
    tenant: str
    scopes: list[str]
    created_at: datetime
    last_issued_at: datetime | None


@timed
async def live_grants(
    conn: asyncpg.Connection, user_id: str, access_lifetime: timedelta, limit: int
) -> list[LiveGrant]:
    """A user's live grants across every tenant, newest first, at most `limit`."""
    rows = await conn.fetch(
        """SELECT f.id::text AS id, f.client_id, f.tenant_key, f.scopes, f.created_at, t.last_issued_at
             FROM engram.oauth_families f
             LEFT JOIN LATERAL (
                 SELECT max(r.created_at) AS last_issued_at,
                        bool_or(r.used_at IS NULL AND r.expires_at > now()) AS refreshable
                   FROM engram.oauth_refresh_tokens r WHERE r.family_id = f.id) t ON true
            WHERE f.user_id = $1::uuid AND f.revoked_at IS NULL
              AND (t.refreshable OR t.last_issued_at > now() - $2::interval
                   OR EXISTS (SELECT 1 FROM engram.oauth_codes c
                               WHERE c.family_id = f.id AND c.used_at IS NULL AND c.expires_at > now()))
            ORDER BY f.created_at DESC, f.id LIMIT $3""",
        user_id,
        access_lifetime,
        limit,
    )
    return [
        LiveGrant(r["id"], r["client_id"], r["tenant_key"], list(r["scopes"]), r["created_at"], r["last_issued_at"])
        for r in rows
    ]


@timed
async def disconnect(conn: asyncpg.Connection, user_id: str, client_id: str, tenant: str) -> tuple[list[str], bool]:
    """Revokes every unrevoked grant of a user for a client on a tenant and forgets the consent
    remembered for them, in one transaction: (the grants revoked, whether a consent was forgotten)."""
    async with conn.transaction():
        rows = await conn.fetch(
            "UPDATE engram.oauth_families SET revoked_at = now(), revoked_why = 'disconnected by the user'"
            " WHERE user_id = $1::uuid AND client_id = $2 AND tenant_key = $3 AND revoked_at IS NULL"
            " RETURNING id::text",
            user_id,
            client_id,
            tenant,
        )
        forgotten = await conn.execute(
            "DELETE FROM engram.oauth_consents WHERE user_id = $1::uuid AND client_id = $2 AND tenant_key = $3",
            user_id,
            client_id,
            tenant,
        )
    return [r[0] for r in rows], not forgotten.endswith(" 0")


# --- consents -------------------------------------------------------------------------------------


@timed
async def consents(conn: asyncpg.Connection, user_id: str, client_id: str) -> list[tuple[str, list[str]]]:
    """(tenant, scopes) a user has approved for a client, newest first."""
    rows = await conn.fetch(
        "SELECT tenant_key, scopes FROM engram.oauth_consents WHERE user_id = $1::uuid AND client_id = $2"
        " ORDER BY created_at DESC",
        user_id,
        client_id,
    )
    return [(r["tenant_key"], list(r["scopes"])) for r in rows]


@dataclass(frozen=True, slots=True)
class Consent:
    client_id: str
    tenant: str
    scopes: list[str]
    created_at: datetime


@timed
async def user_consents(conn: asyncpg.Connection, user_id: str, limit: int) -> list[Consent]:
    """The consents a user asked to be remembered, on every tenant, newest first, at most `limit`."""
    rows = await conn.fetch(
        "SELECT client_id, tenant_key, scopes, created_at FROM engram.oauth_consents WHERE user_id = $1::uuid"
        " ORDER BY created_at DESC, client_id, tenant_key LIMIT $2",
        user_id,
        limit,
    )
    return [Consent(r["client_id"], r["tenant_key"], list(r["scopes"]), r["created_at"]) for r in rows]


@timed
async def remember_consent(
    conn: asyncpg.Connection, user_id: str, client_id: str, tenant: str, scopes: Sequence[str]
) -> None:
    await conn.execute(
        "INSERT INTO engram.oauth_consents (user_id, client_id, tenant_key, scopes) VALUES ($1::uuid, $2, $3, $4)"
        " ON CONFLICT (user_id, client_id, tenant_key) DO UPDATE SET scopes = excluded.scopes, created_at = now()",
        user_id,
        client_id,
        tenant,
        list(scopes),
    )


@timed
async def forget_consents(
    conn: asyncpg.Connection, *, user_id: str | None = None, client_id: str | None = None
) -> None:
    await conn.execute(
        "DELETE FROM engram.oauth_consents WHERE ($1::uuid IS NULL OR user_id = $1::uuid)"
        " AND ($2::text IS NULL OR client_id = $2)",
        user_id,
        client_id,
    )


# --- signing keys -------------------------------------------------------------------------------------


@timed
async def signing_keys(conn: asyncpg.Connection) -> list[SigningKey]:
    """Keys that sign now, will sign soon, or still verify tokens signed before a rotation."""
    rows = await conn.fetch(
        "SELECT kid, private_jwk, activates_at, retires_at FROM engram.signing_keys"
        " WHERE retires_at IS NULL OR retires_at > now() ORDER BY activates_at"
    )
    return [SigningKey(r["kid"], r["private_jwk"], r["activates_at"], r["retires_at"]) for r in rows]


@timed
async def add_signing_key(
    conn: asyncpg.Connection,
    kid: str,
    private_jwk: dict[str, Any],
    *,
    activate_in: timedelta,
    retire_others_in: timedelta | None,
) -> None:
    """Adds a key that signs from `activate_in` from now; older keys stop verifying later."""
    await conn.execute(
        "INSERT INTO engram.signing_keys (kid, private_jwk, activates_at) VALUES ($1, $2, now() + $3)",
        kid,
        private_jwk,
        activate_in,
    )
    if retire_others_in is not None:
        await conn.execute(
            "UPDATE engram.signing_keys SET retires_at = now() + $2 WHERE kid <> $1 AND retires_at IS NULL",
            kid,
            retire_others_in,
        )


@timed
async def add_first_signing_key(conn: asyncpg.Connection, kid: str, private_jwk: dict[str, Any]) -> None:
    """The first key, unless another replica made one at the same moment."""
    await conn.execute(
        "INSERT INTO engram.signing_keys (kid, private_jwk) SELECT $1, $2"
        " WHERE NOT EXISTS (SELECT 1 FROM engram.signing_keys WHERE retires_at IS NULL OR retires_at > now())",
        kid,
        private_jwk,
    )


# --- rate windows, events, housekeeping --------------------------------------------------------------


@timed
async def hit(conn: asyncpg.Connection, bucket: str, window_no: int) -> int:
    """Counts one hit in the fixed window starting at epoch second `window_no`; returns its count so far."""
    return int(
        await conn.fetchval(
            "INSERT INTO engram.rate_windows (bucket, window_no, hits) VALUES ($1, $2, 1)"
            " ON CONFLICT (bucket, window_no) DO UPDATE SET hits = engram.rate_windows.hits + 1 RETURNING hits",
            bucket,
            window_no,
        )
    )


@timed
async def hits(conn: asyncpg.Connection, bucket: str, window_no: int) -> int:
    count = await conn.fetchval(
        "SELECT hits FROM engram.rate_windows WHERE bucket = $1 AND window_no = $2", bucket, window_no
    )
    return int(count or 0)


@timed
async def event(
    conn: asyncpg.Connection,
    event: str,
    outcome: str,
    *,
    user_id: str | None = None,
    client_id: str | None = None,
    tenant: str | None = None,
    detail: str = "",
    request_id: str = "",
) -> None:
    await conn.execute(
        "INSERT INTO engram.auth_events (event, outcome, user_id, client_id, tenant_key, detail, request_id)"
        " VALUES ($1, $2, $3::uuid, $4, $5, $6, $7)",
        event,
        outcome,
        user_id,
        client_id,
        tenant,
        detail[:500],
        request_id,
    )


@dataclass(frozen=True, slots=True)
class AuthEvent:
    """An outcome of an authorization flow, as `engram audit auth` lists it."""

    at: datetime
    event: str
    outcome: str
    username: str | None
    client_id: str | None
    tenant_key: str | None
    detail: str
    request_id: str


@timed
async def events(conn: asyncpg.Connection, limit: int, since: datetime | None) -> list[AuthEvent]:
    rows = await conn.fetch(
        "SELECT e.at, e.event, e.outcome, u.username, e.client_id, e.tenant_key, e.detail, e.request_id"
        " FROM engram.auth_events e LEFT JOIN engram.users u ON u.id = e.user_id"
        " WHERE $2::timestamptz IS NULL OR e.at >= $2 ORDER BY e.id DESC LIMIT $1",
        limit,
        since,
    )
    return [AuthEvent(*r) for r in rows]


@timed
async def sweep(conn: asyncpg.Connection, unused_client_age: timedelta, grant_retention: timedelta) -> None:
    """Removes what has expired: requests, codes, refresh tokens, sessions (the console's too), old rate
    windows, dynamically registered clients never used within `unused_client_age`, and grants revoked,
    or left with no token nor code, longer than `grant_retention` ago (their codes and tokens with them)."""
    await conn.execute(
        """WITH r AS (DELETE FROM engram.oauth_requests WHERE expires_at < now()),
                c AS (DELETE FROM engram.oauth_codes WHERE expires_at < now() - interval '1 day'),
                t AS (DELETE FROM engram.oauth_refresh_tokens WHERE expires_at < now()),
                s AS (DELETE FROM engram.web_sessions WHERE expires_at < now()),
                cs AS (DELETE FROM engram.console_sessions WHERE expires_at < now()),
                f AS (DELETE FROM engram.oauth_families f
                       WHERE f.revoked_at < now() - $2::interval
                          OR (f.created_at < now() - $2::interval
                              AND NOT EXISTS (SELECT 1 FROM engram.oauth_refresh_tokens r WHERE r.family_id = f.id)
                              AND NOT EXISTS (SELECT 1 FROM engram.oauth_codes c WHERE c.family_id = f.id))),
                w AS (DELETE FROM engram.rate_windows WHERE window_no < extract(epoch FROM now())::bigint - 86400)
           DELETE FROM engram.oauth_clients
            WHERE kind = 'dynamic' AND last_used_at IS NULL AND created_at < now() - $1::interval""",
        unused_client_age,
        grant_retention,
    )
