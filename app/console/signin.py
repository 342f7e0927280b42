"""The console as a first-party client of Engram's own authorization server.

It asks for a code with PKCE (S256) at /authorize like any client, and exchanges the code (and
later the refresh token) server-side, by calling the token endpoint's own handler in this process:
the same client and PKCE checks as over HTTP, and the tokens never reach the browser. The tenant
is chosen on the authorization server's consent page among the person's memberships and arrives
as the token's tenant claim; console URLs and forms never name it.
"""

from __future__ import annotations

import base64
import hashlib
import time
from dataclasses import dataclass
from urllib.parse import urlencode

import httpx2
from mcp.server.auth.handlers.token import TokenHandler
from starlette.routing import request_response

from app.authserver.server import AuthServer

CLIENT_ID = "engram-console"
CLIENT_NAME = "Engram console"


@dataclass(frozen=True, slots=True)
class Tokens:
    access_token: str
    refresh_token: str | None
    expires_at: float


def challenge_of(verifier: str) -> str:
    """The PKCE S256 challenge of `verifier`."""
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


class SignIn:
    def __init__(self, auth: AuthServer, *, issuer: str, resource: str, scopes: list[str], callback: str) -> None:
        self.issuer = issuer
        self._resource = resource
        self._scopes = " ".join(scopes)
        self.callback = callback
        self._auth = auth
        auth.add_first_party(CLIENT_ID, CLIENT_NAME, callback)
        token = request_response(TokenHandler(auth.provider, auth.clients).handle)
        self._http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=token), base_url=issuer)

    def authorize_url(self, state: str, challenge: str) -> str:
        query = {
            "response_type": "code",
            "client_id": CLIENT_ID,
            "redirect_uri": self.callback,
            "scope": self._scopes,
            "state": state,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "resource": self._resource,
        }
        return f"{self.issuer}/authorize?{urlencode(query)}"

    async def exchange(self, code: str, verifier: str) -> Tokens | None:
        return await self._token(
            {
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": self.callback,
                "code_verifier": verifier,
                "resource": self._resource,
            }
        )

    async def refresh(self, refresh_token: str) -> Tokens | None:
        return await self._token(
            {"grant_type": "refresh_token", "refresh_token": refresh_token, "resource": self._resource}
        )

    async def revoke(self, token: str) -> None:
        """Ends the grant the token belongs to (every token of this sign-in)."""
        client = await self._auth.clients.get(CLIENT_ID)
        if client is not None:
            await self._auth.provider.revoke(client, token)

    async def _token(self, form: dict[str, str]) -> Tokens | None:
        answer = await self._http.post("/token", data={**form, "client_id": CLIENT_ID})
        if answer.status_code != 200:
            return None
        body = answer.json()
        return Tokens(body["access_token"], body.get("refresh_token"), time.time() + float(body.get("expires_in", 0)))
