"""API keys for headless agents: `egk_<id>_<secret>`; only a SHA-256 of the secret is stored.

The secret has 256 bits of entropy, so a plain hash is as strong as a slow one would be. Checking a
key a caller sends is apikey_checks.py's (it answers the MCP SDK's AccessToken): this module stays
light for the services and the CLI that make keys.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import string
from datetime import UTC, datetime, timedelta

PREFIX = "egk_"
ISSUER = "engram:api-key"
FORMAT = re.compile(r"^egk_([a-z0-9]{12})_([A-Za-z0-9_-]{43})$")
_ALPHABET = string.ascii_lowercase + string.digits


def generate() -> tuple[str, str, bytes]:
    """A new key: (id, the full key to show once, the hash to store)."""
    key_id = "".join(secrets.choice(_ALPHABET) for _ in range(12))
    secret = secrets.token_urlsafe(32)
    return key_id, f"{PREFIX}{key_id}_{secret}", hash_secret(secret)


def expiry(days: int | None) -> datetime | None:
    """When a key made now for `days` days ends (None or 0: it does not)."""
    return datetime.now(UTC) + timedelta(days=days) if days else None


def hash_secret(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()
