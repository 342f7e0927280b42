"""The console's sessions. The browser holds only a random cookie; the tokens, the CSRF secret and
the one-line notice after a change are kept in PostgreSQL by the authorization server's
`ClientSessions` (sealed with a key only the cookie gives), so any replica serves any request and a
restart signs nobody out.

An unfinished sign-in keeps nothing on the server: its `state` and PKCE verifier are derived from a
random cookie set when it began, and derived again at the callback.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass, field
from typing import Any

from app.authserver.client_sessions import ClientSessions, usable
from app.console.signin import Tokens


@dataclass(slots=True)
class Session:
    """One signed-in browser: whose tokens, with which CSRF secret, at which version of its tokens."""

    cookie: str
    access_token: str
    refresh_token: str | None
    expires_at: float  # when the access token ends (its own `exp`)
    username: str  # the account's name
    display_name: str
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    version: int = 1
    notice: str = ""  # what the last change said, shown once on the next page
    told: str = ""  # a notice this request leaves for the next page
    shown: str = ""  # the notice this request displayed

    def take_notice(self) -> str:
        self.shown, self.notice = self.notice, ""
        return self.shown

    def record(self) -> dict[str, Any]:
        """What is sealed: everything but the cookie, the version and the notices."""
        return {name: getattr(self, name) for name in SEALED}


SEALED = ("access_token", "refresh_token", "expires_at", "username", "display_name", "csrf")


class Sessions:
    def __init__(self, kept: ClientSessions) -> None:
        self._kept = kept

    async def open(self, tokens: Tokens, username: str, display_name: str) -> Session:
        session = Session("", tokens.access_token, tokens.refresh_token, tokens.expires_at, username, display_name)
        session.cookie = await self._kept.open(session.record())
        return session

    async def get(self, cookie: str | None) -> Session | None:
        opened = await self._kept.get(cookie)
        if cookie is None or opened is None:
            return None
        sealed = {name: opened.record[name] for name in SEALED}
        return Session(cookie=cookie, version=opened.version, notice=opened.notice, **sealed)

    async def claim_refresh(self, session: Session) -> bool:
        """Whether this request is the one to spend the refresh token: it is single-use, and a second
        spend (from another request or replica) would revoke the whole grant."""
        return await self._kept.claim_refresh(session.cookie, session.version)

    async def renew(self, session: Session, tokens: Tokens) -> Session | None:
        session.access_token, session.refresh_token = tokens.access_token, tokens.refresh_token
        session.expires_at = tokens.expires_at
        if not await self._kept.renew(session.cookie, session.version, session.record()):
            return None
        session.version += 1
        return session

    async def settle(self, session: Session) -> None:
        """Keeps the notice this request left, or clears the one it showed."""
        if session.told:
            await self._kept.set_notice(session.cookie, session.told)
        elif session.shown:
            await self._kept.clear_notice(session.cookie, session.shown)

    async def close(self, cookie: str | None) -> None:
        await self._kept.close(cookie)


@dataclass(frozen=True, slots=True)
class PendingSignIn:
    """What the callback checks: the `state` sent to /authorize, and the PKCE verifier."""

    state: str
    verifier: str

    @classmethod
    def of(cls, cookie: str | None) -> PendingSignIn | None:
        """The sign-in a cookie set by `begin` stands for; None for what cannot be such a cookie."""
        if not usable(cookie):
            return None
        return cls(_derive(cookie, b"state"), _derive(cookie, b"verifier"))

    @classmethod
    def begin(cls) -> tuple[str, PendingSignIn]:
        """A new sign-in: the cookie to set, and the state and verifier it stands for."""
        cookie = secrets.token_urlsafe(32)
        return cookie, cls(_derive(cookie, b"state"), _derive(cookie, b"verifier"))


def _derive(cookie: str, purpose: bytes) -> str:
    mac = hmac.new(cookie.encode(), b"engram-console-sign-in:" + purpose, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode()
