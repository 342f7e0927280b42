"""The server's own keys and clients as the operator manages them, in the control database: the
key that signs cursors (`engram cursor-key`), the token-signing keys (`engram keys`) and the
OAuth clients (`engram client`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from app.services.operator.cells import Owners
from app.store import cursor_keys, oauth


class Keys:
    def __init__(self, owners: Owners) -> None:
        self.owners = owners

    async def rotate_cursor_key(self, retire_after_seconds: float) -> tuple[str, list[str]]:
        """A new cursor-signing key; the keys whose cursors have all expired removed. Their ids."""
        async with self.owners.control() as control:
            return await cursor_keys.rotate(control, retire_after_seconds)

    async def signing_keys(self) -> list[oauth.SigningKey]:
        async with self.owners.control() as control:
            return await oauth.signing_keys(control)

    async def add_client(self, client_id: str, metadata: dict[str, Any], secret_hash: bytes | None) -> None:
        """A configured (`static`) client; its metadata checked by the caller."""
        async with self.owners.control() as control:
            await oauth.add_client(control, client_id, "static", metadata, secret_hash)

    async def remove_client(self, client_id: str) -> bool:
        async with self.owners.control() as control:
            return await oauth.remove_client(control, client_id)

    async def clients(self) -> list[tuple[oauth.Client, datetime, datetime | None]]:
        async with self.owners.control() as control:
            return await oauth.list_clients(control)
