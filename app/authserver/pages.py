"""The pages a person sees while an application asks for access: sign-in and consent.

Server-rendered, usable without JavaScript. Every form carries a CSRF token bound to a cookie
(signed double submit); every page is sent with a strict Content Security Policy, may not be
framed, and is never cached.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.templating import Jinja2Templates

from app import web
from app.authserver.accounts import Accounts, SignInRefused, User
from app.authserver.clients import EngramClient, public_view
from app.authserver.provider import Provider

_TEMPLATES = Jinja2Templates(directory=Path(__file__).parent / "templates")
MAX_FIELD = 1000
_MAY = {"reader": "read", "writer": "read and write", "admin": "read, write and administer"}


class Cookies(web.Cookies):
    """The sign-in session's and the CSRF token's cookies."""

    @property
    def session(self) -> str:
        return self.name("engram-session")

    @property
    def csrf(self) -> str:
        return self.name("engram-csrf")


def security_headers(response: Response, form_targets: Sequence[str] = ()) -> Response:
    """A strict policy: own stylesheet only, no script, forms only to here (and where the consent
    form's redirect goes, which Chromium also checks), never framed, never cached."""
    return web.secure(response, web.policy(form_targets=form_targets))


def _redirect_source(uri: str) -> str:
    """The CSP source that admits a redirect to `uri` after the form is posted."""
    parts = urlsplit(uri)
    if parts.scheme in ("http", "https"):
        return f"{parts.scheme}://{parts.netloc}"
    return f"{parts.scheme}:"


class Pages:
    def __init__(
        self,
        provider: Provider,
        accounts: Accounts,
        *,
        prefix: str,
        cookies: Cookies,
        local_accounts: bool,
        auto_sign_in: bool,
        providers: Sequence[tuple[str, str]] = (),
    ) -> None:
        self._provider = provider
        self._accounts = accounts
        self._prefix = prefix
        self.cookies = cookies
        self._local_accounts = local_accounts
        self._auto_sign_in = auto_sign_in  # dev mode on loopback: the dev user is signed in at once
        self._providers = list(providers)  # (name, label) of upstream sign-in providers
        self._csrf_key = b""

    def start(self, csrf_key: bytes) -> None:
        self._csrf_key = csrf_key

    # --- CSRF -----------------------------------------------------------------------------------

    def _csrf_token(self, nonce: str, purpose: str, request_id: str) -> str:
        message = f"{nonce}\x00{purpose}\x00{request_id}".encode()
        return hmac.new(self._csrf_key, message, hashlib.sha256).hexdigest()

    def _csrf_ok(self, request: Request, purpose: str, request_id: str, token: str) -> bool:
        nonce = request.cookies.get(self.cookies.csrf)
        return bool(nonce) and hmac.compare_digest(self._csrf_token(nonce or "", purpose, request_id), token)

    def _render(
        self, request: Request, template: str, context: dict[str, Any], status: int = 200, targets: Sequence[str] = ()
    ) -> Response:
        nonce = request.cookies.get(self.cookies.csrf) or secrets.token_urlsafe(24)
        purpose = context.get("purpose", "")
        csrf = self._csrf_token(nonce, purpose, context.get("request_id", "")) if purpose else ""
        response = _TEMPLATES.TemplateResponse(
            request, template, {**context, "csrf": csrf, "static": f"{self._prefix}/static"}, status_code=status
        )
        if request.cookies.get(self.cookies.csrf) != nonce:
            self.cookies.set(response, self.cookies.csrf, nonce, None)
        return security_headers(response, targets)

    def message(self, request: Request, heading: str, message: str, status: int) -> Response:
        return self._render(request, "message.html", {"heading": heading, "message": message}, status)

    # --- the pages --------------------------------------------------------------------------------

    async def consent(self, request: Request) -> Response:
        """GET: sign-in first if needed; then the consent page, or straight back if remembered."""
        request_id = request.query_params.get("request", "")[:MAX_FIELD]
        pending = await self._provider.pending(request_id) if request_id else None
        if pending is None:
            return self._expired(request)
        client, params = pending
        user = await self._accounts.session_user(request.cookies.get(self.cookies.session))
        if user is None and self._auto_sign_in:
            user = await self._accounts.dev_user()
            response = await self._consent_page(request, request_id, client, params, user)
            self.cookies.set(response, self.cookies.session, await self._accounts.open_session(user), None)
            return response
        if user is None:
            return self._sign_in_page(request, request_id, client)
        return await self._consent_page(request, request_id, client, params, user)

    async def sign_in(self, request: Request) -> Response:
        """POST of the sign-in form: on success a session cookie, and back to the consent page."""
        form = await request.form()
        request_id = _field(form, "request")
        pending = await self._provider.pending(request_id) if request_id else None
        if pending is None:
            return self._expired(request)
        client = pending[0]
        if not self._local_accounts:
            return self.message(request, "Not available", "Local accounts are switched off here.", 404)
        if not self._csrf_ok(request, "sign-in", request_id, _field(form, "csrf")):
            return self._sign_in_page(request, request_id, client, "This form expired. Please sign in again.", 403)
        username = _field(form, "username")
        address = request.client.host if request.client else "unknown"
        try:
            user = await self._accounts.sign_in(username, _field(form, "password"), address)
        except SignInRefused as refused:
            status = 429 if refused.retry_after else 401
            page = self._sign_in_page(request, request_id, client, refused.message, status, username)
            if refused.retry_after:
                page.headers["Retry-After"] = str(refused.retry_after)
            return page
        response = RedirectResponse(f"{self._prefix}/consent?{urlencode({'request': request_id})}", status_code=303)
        self.cookies.set(response, self.cookies.session, await self._accounts.open_session(user), None)
        return security_headers(response)

    async def decide(self, request: Request) -> Response:
        """POST of the consent form: allow (a code for the chosen tenant) or deny."""
        form = await request.form()
        request_id = _field(form, "request")
        if not self._csrf_ok(request, "consent", request_id, _field(form, "csrf")):
            return self.message(request, "Request refused", "This form expired or did not come from this page.", 403)
        user = await self._accounts.session_user(request.cookies.get(self.cookies.session))
        pending = await self._provider.pending(request_id) if request_id else None
        if pending is None:
            return self._expired(request)
        if user is None:
            return self._sign_in_page(request, request_id, pending[0])
        client, params = pending
        if _field(form, "decision") != "allow":
            target = await self._provider.deny(request_id, user)
            return self._back(target) if target else self._expired(request)
        tenant = _field(form, "tenant")
        role = {m.tenant: m.role for m in await self._accounts.tenants(user)}.get(tenant)
        if role is None:
            return self.message(request, "Not allowed", "You are not a member of that tenant.", 403)
        scopes = self._provider.grantable(params["scopes"], role)
        if not scopes:
            target = await self._provider.deny(request_id, user, "your role allows none of the requested scopes")
            return self._back(target) if target else self._expired(request)
        if _field(form, "remember") == "yes" and not self._provider.clients.is_first_party(client.client_id):
            await self._provider.remember(user, client.client_id, tenant, scopes)
        target = await self._provider.approve(request_id, user, tenant, scopes)
        return self._back(target) if target else self._expired(request)

    # --- helpers ---------------------------------------------------------------------------------

    async def _consent_page(
        self, request: Request, request_id: str, client: EngramClient, params: dict[str, Any], user: User
    ) -> Response:
        memberships = await self._accounts.tenants(user)
        if not memberships:
            return self.message(
                request, "No memory to share", "You are not a member of any tenant yet. Ask an administrator.", 403
            )
        first_party = self._provider.clients.is_first_party(client.client_id)
        remembered = (
            None
            if first_party  # the console's consent page is where a person picks the tenant: always shown
            else await self._provider.remembered(user, client.client_id, memberships, params["scopes"])
        )
        if remembered is not None:
            tenant, scopes = remembered
            target = await self._provider.approve(request_id, user, tenant, scopes)
            if target:
                return self._back(target)
        tenants = [
            {"tenant": m.tenant, "role": m.role, "may": _MAY[m.role]}
            for m in memberships
            if self._provider.grantable(params["scopes"], m.role)
        ]
        if not tenants:
            return self.message(request, "Not allowed", "None of your roles allows what this application asks.", 403)
        context = {
            "purpose": "consent",
            "request_id": request_id,
            "client": public_view(client),
            "user": user,
            "tenants": tenants,
            "scopes": params["scopes"] or self._provider.grantable(None, "writer"),
            "action": f"{self._prefix}/consent",
            "first_party": first_party,
        }
        return self._render(request, "consent.html", context, targets=[_redirect_source(params["redirect_uri"])])

    def _sign_in_page(
        self,
        request: Request,
        request_id: str,
        client: EngramClient,
        error: str = "",
        status: int = 200,
        username: str = "",
    ) -> Response:
        context = {
            "purpose": "sign-in",
            "request_id": request_id,
            "client": public_view(client),
            "error": error,
            "username": username,
            "local_accounts": self._local_accounts,
            "providers": [
                {"label": label, "url": f"{self._prefix}/upstream/{name}?{urlencode({'request': request_id})}"}
                for name, label in self._providers
            ],
            "action": f"{self._prefix}/sign-in",
        }
        return self._render(request, "sign_in.html", context, status)

    def _expired(self, request: Request) -> Response:
        return self.message(
            request, "This link has expired", "Go back to your application and connect again to start over.", 400
        )

    def _back(self, target: str) -> Response:
        return security_headers(RedirectResponse(target, status_code=303))


def _field(form: Any, name: str) -> str:
    value = form.get(name)
    return value[:MAX_FIELD] if isinstance(value, str) and "\x00" not in value else ""
