"""A caller's API key checked against the database: cached briefly, unknown ids remembered, and
lookups bounded, since anyone can send a bearer shaped like a key (apikeys.py makes them)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import time
from collections.abc import Awaitable, Callable
from typing import Any

from cachetools import TTLCache
from mcp.server.auth.provider import AccessToken

from app.auth.apikeys import FORMAT, ISSUER, PREFIX, hash_secret

Lookup = Callable[
    [str], Awaitable[Any]
]  # key id -> record with tenant_key, secret_hash, scopes, expires_at, revoked_at


class ApiKeys:
    """Verifies API keys against the database, caching each answer briefly.

    Anyone can send a bearer shaped like a key, so the cost of a made-up one is bounded: answers
    are cached by the key's digest (a revocation bites within `cache_seconds`), unknown key ids
    are remembered by id, and at most `max_lookups` run at once, so a flood of guesses cannot
    take the database pool from tool calls.
    """

    def __init__(self, lookup: Lookup, tenant_claim: str, cache_seconds: float = 30, max_lookups: int = 4) -> None:
        self._lookup = lookup
        self._tenant_claim = tenant_claim
        ttl = max(cache_seconds, 0.001)
        self._answers: TTLCache[bytes, AccessToken | None] = TTLCache(maxsize=10_000, ttl=ttl)
        self._unknown_ids: TTLCache[str, bool] = TTLCache(maxsize=100_000, ttl=max(ttl, 60))
        self._lookups = asyncio.Semaphore(max_lookups)

    async def verify(self, token: str) -> AccessToken | None:
        match = FORMAT.match(token)
        if match is None or match[1] in self._unknown_ids:
            return None
        now = time.time()
        digest = hashlib.sha256(token.encode()).digest()
        if digest in self._answers:
            found = self._answers[digest]
            return found if found is None or (found.expires_at or now + 1) > now else None
        async with self._lookups:
            found = await self._check(match[1], match[2], now)
        self._answers[digest] = found
        return found

    async def _check(self, key_id: str, secret: str, now: float) -> AccessToken | None:
        row = await self._lookup(key_id)
        if row is None:
            self._unknown_ids[key_id] = True
            return None
        if not hmac.compare_digest(row.secret_hash, hash_secret(secret)):
            return None
        if row.revoked_at is not None:
            return None
        expires = int(row.expires_at.timestamp()) if row.expires_at is not None else None
        if expires is not None and expires <= now:
            return None
        subject = f"api-key:{key_id}"
        return AccessToken(
            token=f"{PREFIX}{key_id}",  # never keep the secret around
            client_id=subject,
            scopes=list(row.scopes),
            expires_at=expires,
            subject=subject,
            claims={"iss": ISSUER, "sub": subject, self._tenant_claim: row.tenant_key},
        )
