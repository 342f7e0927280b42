"""The console's server-side sessions: the browser holds only a random session id in an HttpOnly
cookie; the tokens, the CSRF secret and the flash message stay here.

Sessions live in this process's memory, bounded in number and age. Behind several replicas a
person whose request reaches another replica signs in again (the authorization server's own
session makes that a click on the tenant page), unless the ingress keeps them on one (docs/console.md).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field

from cachetools import TTLCache

SESSION_SECONDS = 12 * 3600
SIGN_IN_SECONDS = 600  # an unfinished sign-in (state and PKCE verifier) waits this long
MAX_SESSIONS = 10_000


@dataclass(slots=True)
class Session:
    """One signed-in browser: whose tokens, for which tenant, with which CSRF secret."""

    access_token: str
    refresh_token: str | None
    expires_at: float  # when the access token ends (its own `exp`)
    username: str  # the account's name
    display_name: str
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    flash: str = ""

    def take_flash(self) -> str:
        message, self.flash = self.flash, ""
        return message


@dataclass(frozen=True, slots=True)
class PendingSignIn:
    """What the callback checks: the `state` sent to /authorize, and the PKCE verifier."""

    state: str
    verifier: str
    back_to: str


def _key(value: str) -> str:
    """Sessions are found by a hash of the cookie: a memory dump does not hand out live cookies."""
    return hashlib.sha256(value.encode()).hexdigest()


class Sessions:
    def __init__(self, max_sessions: int = MAX_SESSIONS, seconds: float = SESSION_SECONDS) -> None:
        self._sessions: TTLCache[str, Session] = TTLCache(maxsize=max_sessions, ttl=seconds)
        self._pending: TTLCache[str, PendingSignIn] = TTLCache(maxsize=max_sessions, ttl=SIGN_IN_SECONDS)

    def open(self, session: Session) -> str:
        value = secrets.token_urlsafe(32)
        self._sessions[_key(value)] = session
        return value

    def get(self, value: str | None) -> Session | None:
        if not value or len(value) > 100:
            return None
        return self._sessions.get(_key(value))

    def close(self, value: str | None) -> None:
        if value and len(value) <= 100:
            self._sessions.pop(_key(value), None)

    def begin(self, pending: PendingSignIn) -> str:
        value = secrets.token_urlsafe(32)
        self._pending[_key(value)] = pending
        return value

    def finish(self, value: str | None) -> PendingSignIn | None:
        """The sign-in this browser began, once: a replayed callback finds nothing."""
        if not value or len(value) > 100:
            return None
        return self._pending.pop(_key(value), None)
