"""Opaque pagination cursors: signed, bound to the tenant and the listing they came from, and short-lived.

A cursor is base64url(JSON) + "." + HMAC-SHA256 over it. The JSON names the tenant, the listing,
the position, the signing key's id and the issue time. Keys live in the database (every replica
accepts every other's cursors) and rotate: a new key is accepted everywhere at once but signs only
once every replica has had time to load it (KEY_REFRESH), and old keys verify until removed. A
cursor from another tenant, another listing, edited by hand, signed by an unknown key or older
than `max_age` fails verification; it can never widen what a caller may read.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from app.errors import EngramError

KEY_REFRESH = 300.0  # seconds between reads of the keys; a new key signs only after this long
FUTURE_SLACK = 300  # seconds of clock difference between replicas tolerated in issue times

# (key id, key, seconds since the key was added), oldest key first
KeyRows = Sequence[tuple[str, bytes, float]]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True, slots=True)
class _Key:
    id: str
    secret: bytes
    signs_from: float  # monotonic time from which this key may sign


class Cursors:
    def __init__(self, max_age: float = 86400.0, keys: KeyRows = ()) -> None:
        self.max_age = max_age
        self._keys: dict[str, _Key] = {}
        self._loaded = -KEY_REFRESH
        if keys:
            self._set(keys)

    async def load(self, read_keys: Callable[[], Awaitable[KeyRows]]) -> None:
        """Read the keys from the database on first use and every KEY_REFRESH seconds after."""
        if not self._keys or time.monotonic() - self._loaded >= KEY_REFRESH:
            self._set(await read_keys())

    def _set(self, rows: KeyRows) -> None:
        if not rows:
            raise RuntimeError("no cursor signing key in the database: run `engram migrate`")
        now = time.monotonic()
        self._keys = {kid: _Key(kid, secret, now + max(0.0, KEY_REFRESH - age)) for kid, secret, age in rows}
        self._loaded = now

    def _signing_key(self) -> _Key:
        """The newest key every replica has had time to load; the oldest while none has."""
        now = time.monotonic()
        ready = [k for k in self._keys.values() if k.signs_from <= now]
        return ready[-1] if ready else next(iter(self._keys.values()))

    @staticmethod
    def _mac(key: _Key, tenant_id: str, listing: str, body: str) -> bytes:
        """The signature binds the body to its tenant and listing, which the body need not carry:
        a cursor is text a model reads back, so it is kept short (about 80 characters)."""
        signed = f"{tenant_id}\n{listing}\n{body}".encode()
        return _b64(hmac.new(key.secret, signed, hashlib.sha256).digest()[:18]).encode()

    def encode(self, tenant_id: str, listing: str, position: Any) -> str:
        key = self._signing_key()
        body = _b64(orjson.dumps({"p": position, "k": key.id, "i": int(time.time())}))
        return f"{body}.{self._mac(key, tenant_id, listing, body).decode()}"

    def decode(self, cursor: str, tenant_id: str, listing: str) -> Any:
        payload = self._verified(cursor, tenant_id, listing)
        if payload is None:
            raise EngramError("invalid", "this cursor does not belong to this listing; start again without it")
        age = time.time() - payload.get("i", 0)
        if not -FUTURE_SLACK <= age <= self.max_age:
            raise EngramError("invalid", "this cursor has expired; start again without it")
        return payload.get("p")

    def _verified(self, cursor: str, tenant_id: str, listing: str) -> dict[str, Any] | None:
        """The cursor's payload if a known key signed it exactly as it is, for this tenant and listing."""
        body, _, mac = cursor.partition(".")
        if not (body.isascii() and mac.isascii()):
            return None
        try:
            payload = orjson.loads(_unb64(body))
        except (ValueError, orjson.JSONDecodeError):
            return None
        kid = payload.get("k") if isinstance(payload, dict) else None
        key = self._keys.get(kid) if isinstance(kid, str) else None
        if key is None or not isinstance(payload.get("i"), int):
            return None
        return payload if hmac.compare_digest(mac.encode(), self._mac(key, tenant_id, listing, body)) else None
