"""Signing in through other OpenID Connect providers ("Sign in with Google", Entra, Okta, Keycloak).

Authlib's Starlette client does the protocol: discovery, the authorization request with PKCE,
state and nonce, the code exchange, and the ID token's checks. Its state lives in a signed cookie
(Starlette's session middleware) whose key is derived from a secret in the database, so the
callback may land on any replica. A provider's user is linked to an Engram user by (provider,
subject) and never merged into an existing account by a matching name or e-mail address.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
from collections.abc import Sequence
from urllib.parse import urlencode

from authlib.integrations.base_client import OAuthError
from authlib.integrations.starlette_client import OAuth
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from app.authserver.accounts import Accounts, User
from app.authserver.events import Events
from app.authserver.pages import Cookies, Pages, security_headers
from app.authserver.provider import Provider
from app.config import UpstreamProvider
from app.errors import EngramError

logger = logging.getLogger(__name__)
_NOT_A_NAME = re.compile(r"[^a-z0-9._@+-]+")


class Sessions:
    """Starlette's session middleware, keyed once the server has read its secret at start-up."""

    def __init__(self, app: ASGIApp, cookies: Cookies) -> None:
        self._app = app
        self._cookies = cookies
        self._inner: ASGIApp | None = None

    def start(self, secret: bytes) -> None:
        key = hmac.new(secret, b"upstream sign-in state", hashlib.sha256).hexdigest()
        name = "__Host-engram-upstream" if self._cookies.secure else "engram-upstream"
        self._inner = SessionMiddleware(
            self._app,
            secret_key=key,
            session_cookie=name,
            max_age=600,
            same_site="lax",
            https_only=self._cookies.secure,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._inner is None:
            raise RuntimeError("the authorization server has not started")
        await self._inner(scope, receive, send)


class Upstream:
    def __init__(
        self,
        providers: Sequence[UpstreamProvider],
        provider: Provider,
        accounts: Accounts,
        pages: Pages,
        events: Events,
        *,
        issuer: str,
        prefix: str,
    ) -> None:
        self._oauth = OAuth()
        self._labels = {p.name: p.label for p in providers}
        for p in providers:
            self._oauth.register(
                name=p.name,
                client_id=p.client_id,
                client_secret=p.client_secret.get_secret_value(),
                server_metadata_url=f"{p.issuer}/.well-known/openid-configuration",
                client_kwargs={"scope": p.scopes, "code_challenge_method": "S256", "timeout": 10},
            )
        self._provider = provider
        self._accounts = accounts
        self._pages = pages
        self._events = events
        self._issuer = issuer
        self._prefix = prefix

    @property
    def buttons(self) -> list[tuple[str, str]]:
        return list(self._labels.items())

    async def begin(self, request: Request) -> Response:
        """GET /oauth/upstream/<name>?request=…: off to the provider, remembering the request."""
        name = request.path_params["name"]
        request_id = request.query_params.get("request", "")[:200]
        client = self._oauth.create_client(name) if name in self._labels else None
        if client is None or await self._provider.pending(request_id) is None:
            return self._pages.message(request, "This link has expired", "Go back to your application.", 400)
        request.session["request"] = request_id
        try:
            answer = await client.authorize_redirect(request, f"{self._issuer}{self._prefix}/upstream/{name}/callback")
        except (OAuthError, OSError, ValueError) as exc:
            logger.warning("upstream provider %s unreachable: %s", name, type(exc).__name__)
            await self._events("sign_in", "upstream_unreachable", detail=name)
            return self._pages.message(request, "Sign-in unavailable", f"{self._labels[name]} did not answer.", 502)
        return security_headers(answer)

    async def callback(self, request: Request) -> Response:
        """GET …/callback: the provider's answer; on success a session, and back to the consent page."""
        name = request.path_params["name"]
        client = self._oauth.create_client(name) if name in self._labels else None
        request_id = request.session.pop("request", "")
        if client is None or not request_id:
            return self._pages.message(request, "This link has expired", "Go back to your application.", 400)
        try:
            token = await client.authorize_access_token(request)
        except (OAuthError, OSError, ValueError) as exc:
            await self._events("sign_in", "upstream_refused", detail=f"{name}: {type(exc).__name__}")
            return self._pages.message(request, "Sign-in failed", f"{self._labels[name]} did not sign you in.", 401)
        claims = token.get("userinfo") or {}
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject or len(subject) > 255:
            await self._events("sign_in", "upstream_refused", detail=f"{name}: no subject")
            return self._pages.message(request, "Sign-in failed", "The provider did not say who you are.", 401)
        user = await self._user(name, subject, claims)
        if user.disabled:
            await self._events("sign_in", "disabled", user_id=user.id)
            return self._pages.message(request, "Sign-in refused", "This account is disabled.", 403)
        await self._events("sign_in", "ok", user_id=user.id, detail=name)
        response = RedirectResponse(f"{self._prefix}/consent?{urlencode({'request': request_id})}", status_code=303)
        self._pages.cookies.set(response, self._pages.cookies.session, await self._accounts.open_session(user), None)
        return security_headers(response)

    async def _user(self, provider: str, subject: str, claims: dict[str, object]) -> User:
        """The Engram user linked to this identity; a new one, named after the e-mail address, if none."""
        found = await self._accounts.linked_user(provider, subject)
        if found is not None:
            return found
        email = claims.get("email") if claims.get("email_verified", True) else None
        base = _NOT_A_NAME.sub("-", str(email or claims.get("preferred_username") or f"{provider}-user").lower())
        base = base.strip("-._@+")[:80] or f"{provider}-user"
        display = str(claims.get("name") or email or "")[:200]
        for attempt in range(5):
            username = base if attempt == 0 else f"{base}-{secrets.token_hex(2)}"
            try:
                return await self._accounts.link_new_user(username, display, provider, subject)
            except EngramError as exc:
                if exc.code != "conflict":
                    raise
        raise EngramError("conflict", "could not choose a username")
