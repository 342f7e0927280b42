"""Opaque pagination cursors: signed, and bound to the tenant and the listing they came from.

A cursor is base64url(JSON) + "." + HMAC-SHA256 over it with a key kept in the database (so
every replica accepts every other's cursors). A cursor from another tenant, another listing, or
edited by hand fails verification; it can never widen what a caller may read.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from app.errors import EngramError


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Cursors:
    def __init__(self, key: bytes | None = None) -> None:
        self.key = key

    async def load(self, read_key: Callable[[], Awaitable[bytes]]) -> None:
        """Fetch the key on first use: it lives in the database, shared by every replica."""
        if self.key is None:
            self.key = await read_key()

    def _mac(self, body: str) -> str:
        if self.key is None:
            raise RuntimeError("the cursor key is not loaded")
        return _b64(hmac.new(self.key, body.encode(), hashlib.sha256).digest()[:18])

    def encode(self, tenant_id: str, listing: str, position: Any) -> str:
        body = _b64(orjson.dumps({"t": tenant_id, "l": listing, "p": position}))
        return f"{body}.{self._mac(body)}"

    def decode(self, cursor: str, tenant_id: str, listing: str) -> Any:
        body, _, mac = cursor.partition(".")
        try:
            valid = hmac.compare_digest(mac, self._mac(body))
            payload = orjson.loads(_unb64(body)) if valid else None
        except (ValueError, orjson.JSONDecodeError):
            payload = None
        if not payload or payload.get("t") != tenant_id or payload.get("l") != listing:
            raise EngramError("invalid", "this cursor does not belong to this listing; start again without it")
        return payload["p"]
