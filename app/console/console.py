"""The console assembled: sign-in and sessions, the per-request visit (who, with which role), CSRF
on every form, and the routes of its pages (app/console/memory.py, app/console/admin.py).

Every page is for the tenant of the session's verified token; no URL, field or header chooses it.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from mcp.server.transport_security import RequestBodyLimitMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route, request_response
from starlette.types import ASGIApp

from app import web
from app.auth.principal import principal_from_token
from app.auth.verifier import TokenVerifier
from app.authserver.server import STATIC as AUTH_STATIC
from app.authserver.server import AuthServer
from app.console.account import AccountPage
from app.console.admin import AdminPages
from app.console.calls import Runner
from app.console.connect import ConnectPage
from app.console.connected import ConnectedApps
from app.console.cypher import QueryPage
from app.console.hook_pages import HookPages
from app.console.kit import Visit
from app.console.memory import MemoryPages
from app.console.merging import MergePages
from app.console.pinned import PinnedPage
from app.console.plugin_download import PluginDownload
from app.console.sessions import PendingSignIn, Session, Sessions
from app.console.signin import SignIn, challenge_of
from app.console.web import HERE, Static, render, secure
from app.errors import EngramError, http_problem
from app.services import Services
from app.services.models import UUID_PATTERN

logger = logging.getLogger("engram")
PREFIX = "/console"
ENTITY_ID = re.compile(UUID_PATTERN)
FORM_BYTES = 64 * 1024  # a console form: a few fields of at most a few KiB each
REFRESH_AHEAD = 30  # seconds before the access token ends that it is refreshed
REFRESH_WAIT = 0.1, 30  # while another request refreshes: poll every 0.1 s, at most 30 times


class Cookies(web.Cookies):
    """The console's session cookie, and the one that carries a sign-in in progress."""

    @property
    def session(self) -> str:
        return self.name("engram-console")

    @property
    def sign_in(self) -> str:
        return self.name("engram-console-sign-in")


Handler = Callable[[Request, Visit], Awaitable[Response]]


class Console:
    def __init__(
        self,
        auth: AuthServer,
        verifier: TokenVerifier,
        services: Services,
        runner: Runner,
        *,
        transfer_max_bytes: int,
        transfer_seconds: float,
        issuer: str,
        resource: str,
        scopes: list[str],
        tenant_claims: list[str],
        endpoints: Mapping[str, str],
    ) -> None:
        self.auth = auth
        self.verifier = verifier
        self.services = services
        self.run = runner
        self.transfer_max_bytes = transfer_max_bytes
        self.transfer_seconds = transfer_seconds
        self.claims = tenant_claims
        self.endpoints = dict(endpoints)  # the served MCP endpoints' URLs, by tool set (the Connect page)
        self.base_url = issuer  # the server's own address: the console's, the hooks'
        self.sign = SignIn(auth, issuer=issuer, resource=resource, scopes=scopes, callback=f"{issuer}{PREFIX}/callback")
        self.sessions = Sessions(auth.client_sessions)
        self.cookies = Cookies(secure=issuer.startswith("https://"))
        self.static = Static(f"{PREFIX}/static", HERE / "static", AUTH_STATIC)  # the sign-in pages' look too

    # --- rendering --------------------------------------------------------------------------------

    def page(
        self, request: Request, template: str, context: Mapping[str, Any], visit: Visit | None, status: int = 200
    ) -> Response:
        base = {
            "root": PREFIX,
            "static": self.static.base,
            "visit": visit,
            "csrf": visit.session.csrf if visit else "",
            "flash": visit.session.take_notice() if visit else "",
            "endpoint": self.endpoints.get("native", next(iter(self.endpoints.values()), "")),
        }
        return render(request, template, context, status, **base)

    def refused(self, request: Request, visit: Visit | None, exc: EngramError, back: str = "") -> Response:
        status, message = http_problem(exc)
        context = {"heading": "That did not work", "message": message, "back": back}
        return self.page(request, "problem.html", context, visit, status)

    # --- who is asking ------------------------------------------------------------------------------

    async def visit(self, request: Request) -> Visit | None:
        """The signed-in visit, its access token refreshed when it is about to end; None: sign in."""
        cookie = request.cookies.get(self.cookies.session)
        session = await self.sessions.get(cookie)
        if session is None:
            return None
        if session.expires_at - REFRESH_AHEAD < time.time():
            session = await self._refreshed(session)
        access = await self.verifier.verify_token(session.access_token) if session else None
        if session is not None and access is None:  # revoked, or signed by a retired key: try once more
            session = await self._refreshed(session)
            access = await self.verifier.verify_token(session.access_token) if session else None
        if session is None or access is None:
            await self.sessions.close(cookie)
            return None
        sid = (access.claims or {}).get("sid")
        return Visit(session, principal_from_token(access, self.claims), sid if isinstance(sid, str) else "")

    async def _refreshed(self, session: Session) -> Session | None:
        """The session with a fresh access token. One request, across every replica, spends the
        refresh token; the others go on with the token they have while it lasts, or wait for the new one."""
        if await self.sessions.claim_refresh(session):
            tokens = await self.sign.refresh(session.refresh_token) if session.refresh_token else None
            return await self.sessions.renew(session, tokens) if tokens else None
        pause, tries = REFRESH_WAIT
        current: Session | None = session
        for _ in range(tries):
            if current is None or current.version > session.version or current.expires_at > time.time() + 5:
                return current
            await asyncio.sleep(pause)
            current = await self.sessions.get(session.cookie)
        return None

    def signed_in(self, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        """A page for signed-in visits only; refusals of the services become a page saying why."""

        @functools.wraps(handler)
        async def endpoint(request: Request) -> Response:
            visit: Visit | None = None
            try:
                visit = await self.visit(request)  # a token whose tenant claim is malformed: `forbidden`
                if visit is None and request.url.path.startswith(f"{PREFIX}/api/"):
                    return secure(JSONResponse({"error": "sign in at /console first"}, status_code=401))
                if visit is None:
                    return secure(RedirectResponse(PREFIX, status_code=303))
                return await handler(request, visit)
            except EngramError as exc:
                return self.refused(request, visit, exc, _back_to(request))
            except Exception:  # a fault of ours: logged with its traceback, answered as a page with the policy
                logger.exception("console page %s failed", request.url.path)
                context = {"heading": "That did not work", "message": "an internal error; it was logged", "back": ""}
                return self.page(request, "problem.html", context, visit, 500)
            finally:
                if visit is not None:
                    await self.sessions.settle(visit.session)

        return endpoint

    async def form(self, request: Request, visit: Visit) -> dict[str, str]:
        """The posted form's text fields, once its CSRF token matched the session's; else `forbidden`."""
        form = await request.form(max_files=0, max_fields=50)
        fields = {k: v for k, v in form.items() if isinstance(v, str)}
        self.check_csrf(visit, fields)
        return fields

    @staticmethod
    def check_csrf(visit: Visit, fields: Mapping[str, str]) -> None:
        """The session's own token (synchronizer pattern): a page elsewhere cannot read it."""
        if not hmac.compare_digest(fields.get("csrf", "").encode(), visit.session.csrf.encode()):
            raise EngramError("forbidden", "this form expired or did not come from this console; reload the page")

    def done(self, visit: Visit, target: str, message: str) -> Response:
        """After a change: back to `target` (a console path) with a note of what happened."""
        visit.session.told = message
        return secure(RedirectResponse(target, status_code=303))

    # --- signing in and out ----------------------------------------------------------------------

    async def home(self, request: Request) -> Response:
        visit = await self.visit(request)
        if visit is not None:
            return secure(RedirectResponse(f"{PREFIX}/find", status_code=303))
        return self.page(request, "welcome.html", {}, None)

    async def begin(self, request: Request) -> Response:
        """Off to the authorization server: sign in (if needed) and choose the tenant."""
        cookie, pending = PendingSignIn.begin()
        response = RedirectResponse(self.sign.authorize_url(pending.state, challenge_of(pending.verifier)), 303)
        self.cookies.set(response, self.cookies.sign_in, cookie, 600)
        return secure(response)

    async def callback(self, request: Request) -> Response:
        q = request.query_params
        pending = PendingSignIn.of(request.cookies.get(self.cookies.sign_in))
        state = q.get("state", "")
        if pending is None or not hmac.compare_digest(state.encode(), pending.state.encode()):
            return self._sign_in_failed(request, "This sign-in expired or was not started here. Please start again.")
        if q.get("iss") != self.sign.issuer:
            return self._sign_in_failed(request, "The answer did not come from this server's sign-in.")
        if "error" in q:
            return self._sign_in_failed(request, "Sign-in was cancelled, or your role allows nothing here.")
        tokens = await self.sign.exchange(q.get("code", "")[:200], pending.verifier)
        access = await self.verifier.verify_token(tokens.access_token) if tokens else None
        if tokens is None or access is None:
            return self._sign_in_failed(request, "The sign-in could not be completed. Please start again.")
        user = await self.auth.accounts.session_user(request.cookies.get(self.auth.cookies.session))
        username = user.username if user else (access.subject or "")
        display = (user.display_name or user.username) if user else username
        await self.sessions.close(request.cookies.get(self.cookies.session))  # a tenant switch replaces it
        session = await self.sessions.open(tokens, username, display)
        response = RedirectResponse(f"{PREFIX}/find", status_code=303)
        self.cookies.set(response, self.cookies.session, session.cookie)
        self.cookies.clear(response, self.cookies.sign_in)
        return secure(response)

    def _sign_in_failed(self, request: Request, message: str) -> Response:
        context = {"heading": "Not signed in", "message": message, "back": PREFIX}
        response = self.page(request, "problem.html", context, None, 400)
        self.cookies.clear(response, self.cookies.sign_in)
        return response

    async def sign_out(self, request: Request, visit: Visit) -> Response:
        """Signed out everywhere this browser was: the console's session, its grant (its tokens stop
        working within seconds), and the authorization server's own session."""
        await self.form(request, visit)
        await self.sign.revoke(visit.session.refresh_token or visit.session.access_token)
        return await self.signed_out(request)

    async def signed_out(self, request: Request) -> Response:
        """The end of this browser's sessions, the console's and the authorization server's (whose
        grant is already revoked): back to the console's welcome page."""
        await self.sessions.close(request.cookies.get(self.cookies.session))
        signed_in = request.cookies.get(self.auth.cookies.session)
        if signed_in and len(signed_in) <= 100:
            await self.auth.accounts.close_session(signed_in)
        response = RedirectResponse(PREFIX, status_code=303)
        self.cookies.clear(response, self.cookies.session)
        self.auth.cookies.set(response, self.auth.cookies.session, "", 0)
        return secure(response)

    # --- routes ------------------------------------------------------------------------------------

    def routes(self) -> list[BaseRoute]:
        services, auth = self.services, self.auth
        pages = MemoryPages(self, services)
        merging = MergePages(self, services)
        tenant_admin = AdminPages(
            self,
            auth.accounts,
            services.audit,
            services.api_keys,
            services.graph,
            services.transfer,
            max_bytes=self.transfer_max_bytes,
            seconds=self.transfer_seconds,
        )
        apps = ConnectedApps(self, auth.connections, self.signed_out)
        account = AccountPage(self, auth.accounts, auth.cookies.session)
        cypher = QueryPage(self, services.queries)
        pinned = PinnedPage(self, services.pins)
        connect = ConnectPage(self, self.endpoints, self.base_url)
        hook_pages = HookPages(self, services.hooks, self.base_url)
        get = [
            ("", self.home),
            ("/sign-in", self.begin),
            ("/callback", self.callback),
            ("/find", self.signed_in(pages.find)),
            ("/entity/{id}", self.signed_in(pages.entity)),
            ("/entity/{id}/merge", self.signed_in(merging.review)),
            ("/graph", self.signed_in(pages.graph)),
            ("/query", self.signed_in(cypher.show)),
            ("/pinned", self.signed_in(pinned.show)),
            ("/hooks", self.signed_in(hook_pages.show)),
            ("/api/graph", self.signed_in(pages.graph_data)),
            ("/admin", self.signed_in(tenant_admin.overview)),
            ("/admin/audit", self.signed_in(tenant_admin.audit)),
            ("/apps", self.signed_in(apps.listing)),
            ("/account", self.signed_in(account.show)),
            ("/connect", self.signed_in(connect.show)),
            ("/connect/plugin.zip", self.signed_in(PluginDownload(self.base_url, connect.native).download)),
        ]
        post = [
            ("/sign-out", self.sign_out),
            ("/apps/disconnect", apps.disconnect),
            ("/account/password", account.change_password),
            ("/query", cypher.run),
            ("/pinned/unpin", pinned.unpin),
            ("/hooks/settings", hook_pages.save),
            *((f"/entity/{{id}}/{name}", action) for name, action in {**pages.actions(), **merging.actions()}.items()),
            *((f"/admin/{name}", action) for name, action in tenant_admin.actions().items() if name != "import"),
        ]
        routes: list[BaseRoute] = [Route(f"{PREFIX}{path}", endpoint, methods=["GET"]) for path, endpoint in get]
        routes += [
            Route(f"{PREFIX}{path}", _bounded(self.signed_in(handler), FORM_BYTES), methods=["POST"])
            for path, handler in post
        ]
        routes.append(
            Route(
                f"{PREFIX}/admin/import",
                _bounded(self.signed_in(tenant_admin.import_), tenant_admin.max_bytes + FORM_BYTES),
                methods=["POST"],
            )
        )
        routes.append(Route(f"{PREFIX}/static/{{version}}/{{name}}", self.static.serve, methods=["GET"]))
        return routes


def _back_to(request: Request) -> str:
    """Where a refused action's page links back to: the entity it was about (as it is now, after a
    refused view of it), the connected applications, the account page, else the console."""
    parts = request.url.path.split("/")
    about_entity = len(parts) > 3 and parts[2] == "entity" and ENTITY_ID.fullmatch(parts[3])
    if about_entity and (request.method == "POST" or request.url.query):
        return f"{PREFIX}/entity/{parts[3]}"
    if request.method == "POST" and len(parts) > 2 and parts[2] in ("apps", "account"):
        return f"{PREFIX}/{parts[2]}"
    return PREFIX


def _bounded(endpoint: Callable[[Request], Awaitable[Response]], limit: int) -> ASGIApp:
    return RequestBodyLimitMiddleware(request_response(endpoint), limit)
