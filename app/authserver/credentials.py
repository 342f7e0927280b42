"""Random credentials and the hashes they are stored as.

Codes, refresh tokens, sessions and client secrets carry 256 random bits, so a plain SHA-256 is
as strong at rest as a slow hash would be; passwords, chosen by people, get argon2id.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import secrets

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

_hasher = PasswordHasher()  # argon2id with the library's current recommended parameters


@functools.cache
def _dummy() -> str:
    """Verified against when a username is unknown, so that answer takes as long as a wrong password.
    Made on first use, not at import: a hash costs about 0.25 s of every server start otherwise."""
    return _hasher.hash(secrets.token_urlsafe(16))


MIN_PASSWORD = 12  # characters of a new password, wherever it is set (the CLI, the console)
MAX_PASSWORD = 1000


def password_rule(password: str) -> str | None:
    """Why `password` cannot be a new password, or None if it can."""
    if not MIN_PASSWORD <= len(password) <= MAX_PASSWORD or "\x00" in password:
        return f"a password is {MIN_PASSWORD} to {MAX_PASSWORD} characters, without NUL"
    return None


def new_secret() -> tuple[str, bytes]:
    """A fresh credential and its stored form."""
    value = secrets.token_urlsafe(32)
    return value, digest(value)


def digest(value: str) -> bytes:
    return hashlib.sha256(value.encode()).digest()


async def hash_password(password: str) -> str:
    return await asyncio.to_thread(_hasher.hash, password)


async def check_password(stored: str | None, password: str) -> bool:
    """Whether `password` matches; off the event loop, since argon2id is deliberately slow."""

    def verify() -> bool:
        try:
            return _hasher.verify(stored or _dummy(), password) and stored is not None
        except (VerificationError, InvalidHashError):
            return False

    return await asyncio.to_thread(verify)
