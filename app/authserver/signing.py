"""Token-signing keys kept in the database, shared by every replica.

Each replica loads them at start, again every `reload_seconds` (to pick up a rotation), and on a
token naming a key id it does not know (at most once per `min_refresh` seconds). A rotated-in key
is published in the JWKS before it starts signing, and the key it replaces keeps verifying until
the tokens it signed have expired, so a rotation never refuses a valid token.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
from joserfc import jwt
from joserfc.jwk import ECKey, Key, KeySet

from app.store import oauth
from app.store.database import Database

ALGORITHM = "ES256"


def new_key() -> tuple[str, dict[str, Any]]:
    kid = uuid.uuid4().hex
    key = ECKey.generate_key("P-256", parameters={"kid": kid})
    return kid, key.as_dict(private=True)


async def rotate(db: asyncpg.Pool | asyncpg.Connection, *, activate_in: timedelta, retire_after: timedelta) -> str:
    """Adds a new key that signs from `activate_in` on; the others retire `retire_after` later."""
    kid, jwk = new_key()
    await oauth.add_signing_key(db, kid, jwk, activate_in=activate_in, retire_others_in=activate_in + retire_after)
    return kid


class SigningKeys:
    """The signing keys as one replica sees them: the one that signs, and all that verify."""

    def __init__(
        self,
        db: Database,
        *,
        reload_seconds: float = 60,
        min_refresh: float = 5,
        extra: Sequence[ECKey] = (),
    ) -> None:
        self._db = db
        self._reload_seconds = reload_seconds
        self._min_refresh = min_refresh
        self._extra = list(extra)  # verified and published, never used to sign (the dev key file)
        self._keys: list[tuple[oauth.SigningKey, ECKey]] = []
        self._loaded_at = 0.0
        self._unknown_at = 0.0  # the last reload asked for by an unknown key id
        self._lock = asyncio.Lock()

    async def load(self) -> None:
        rows = await self._db.run(oauth.signing_keys)
        if not rows:
            kid, jwk = new_key()
            await self._db.run(oauth.add_first_signing_key, kid, jwk)
            rows = await self._db.run(oauth.signing_keys)
        self._keys = [(row, ECKey.import_key(row.private_jwk)) for row in rows]
        self._loaded_at = time.monotonic()

    async def _fresh(self, kid: str | None = None) -> None:
        """Reload when the keys are older than the reload period, or when a token names a key id not
        loaded (at most once per `min_refresh` seconds, so made-up key ids cannot flood the database)."""
        loaded_at, now = self._loaded_at, time.monotonic()
        unknown = kid is not None and all(key.kid != kid for _, key in self._keys)
        if unknown and now - self._unknown_at >= self._min_refresh:
            self._unknown_at = now
        elif now - loaded_at < self._reload_seconds:
            return
        async with self._lock:
            if self._loaded_at == loaded_at:  # nobody reloaded while this caller waited
                await self.load()

    async def key_set(self, kid: str | None) -> KeySet:
        """Every key that may have signed a valid token (the verifier's KeySource)."""
        await self._fresh(kid)
        keys: list[Key] = [*(key for _, key in self._keys), *self._extra]
        return KeySet(keys)

    async def sign(self, claims: dict[str, Any]) -> str:
        await self._fresh()
        now = datetime.now(UTC)
        active = [key for row, key in self._keys if row.activates_at <= now]
        if not active:
            raise RuntimeError("no active signing key")
        key = active[-1]  # the newest that has activated
        return jwt.encode({"alg": ALGORITHM, "kid": key.kid, "typ": "at+jwt"}, claims, key)

    def jwks(self) -> dict[str, Any]:
        """Public keys, including one rotated in but not yet signing, so caches learn it early."""
        keys = [key for _, key in self._keys] + self._extra
        return {"keys": [{**key.as_dict(private=False), "alg": ALGORITHM, "use": "sig"} for key in keys]}
