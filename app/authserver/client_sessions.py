"""Sessions a first-party client of this server (the console) keeps for a browser, in PostgreSQL so
that every replica knows them. The browser's cookie is their only key: a row is found by one hash
of it and its record sealed (JWE `dir` + A256GCM) with a key derived by another, so neither the
table nor a backup of it opens a session."""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeGuard

from joserfc import jwe
from joserfc.errors import JoseError
from joserfc.jwk import OctKey

from app.store import console_sessions
from app.store.database import Database

_SEAL = {"alg": "dir", "enc": "A256GCM"}
MAX_COOKIE = 100  # our cookies are 43 characters; anything much longer is not one of them


@dataclass(frozen=True, slots=True)
class Opened:
    """A live session's record, its version (refreshes advance it) and its pending notice."""

    record: dict[str, Any]
    version: int
    notice: str


def _found_by(cookie: str) -> bytes:
    return hashlib.sha256(b"engram-console-session:find:" + cookie.encode()).digest()


def _sealed_by(cookie: str) -> OctKey:
    return OctKey.import_key(hashlib.sha256(b"engram-console-session:seal:" + cookie.encode()).digest())


def usable(cookie: str | None) -> TypeGuard[str]:
    """Whether a cookie's value could be one of ours (what else is sent is not looked up at all)."""
    return bool(cookie) and len(cookie or "") <= MAX_COOKIE


class ClientSessions:
    def __init__(self, db: Database, *, ttl: timedelta, refresh_hold: timedelta = timedelta(seconds=30)) -> None:
        self._db = db
        self._ttl = ttl
        self._hold = refresh_hold

    async def open(self, record: Mapping[str, Any]) -> str:
        """A new session holding `record`; returns the cookie that alone finds and opens it."""
        cookie = secrets.token_urlsafe(32)
        await self._db.run(console_sessions.open_session, _found_by(cookie), _seal(cookie, record), self._ttl)
        return cookie

    async def get(self, cookie: str | None) -> Opened | None:
        if not usable(cookie):
            return None
        row = await self._db.run(console_sessions.session, _found_by(cookie))
        if row is None:
            return None
        try:
            record = json.loads(jwe.decrypt_compact(row.sealed, _sealed_by(cookie)).plaintext or b"")
        except (JoseError, ValueError):
            return None
        return Opened(record, row.version, row.notice)

    async def claim_refresh(self, cookie: str, version: int) -> bool:
        """Whether this request is the one to spend the refresh token of `version` (for a short hold)."""
        return await self._db.run(console_sessions.claim_refresh, _found_by(cookie), version, self._hold)

    async def renew(self, cookie: str, version: int, record: Mapping[str, Any]) -> bool:
        return await self._db.run(console_sessions.renew, _found_by(cookie), version, _seal(cookie, record))

    async def set_notice(self, cookie: str, notice: str) -> None:
        await self._db.run(console_sessions.set_notice, _found_by(cookie), notice[:2000])

    async def clear_notice(self, cookie: str, notice: str) -> None:
        await self._db.run(console_sessions.clear_notice, _found_by(cookie), notice[:2000])

    async def close(self, cookie: str | None) -> None:
        if usable(cookie):
            await self._db.run(console_sessions.close_session, _found_by(cookie))


def _seal(cookie: str, record: Mapping[str, Any]) -> str:
    return jwe.encrypt_compact(_SEAL, json.dumps(record, separators=(",", ":")).encode(), _sealed_by(cookie))
