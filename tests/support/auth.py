"""People and clients of the built-in authorization server: a user made with the CLI, a hand-made
client registration, one authorization walked by hand, and waiting for a revoked token's refusal."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import secrets
import uuid
from typing import Any
from urllib.parse import urlencode

import httpx2
import orjson

from tests.support.client import mcp_headers
from tests.support.oauth_agent import Person
from tests.support.server import Server, engram

PASSWORD = "correct horse battery staple"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
REDIRECT = "http://127.0.0.1:33418/callback"


def add_user(server: Server, tenant: str, role: str = "writer") -> Person:
    name = f"u{uuid.uuid4().hex[:10]}"
    made = engram(server.env, "user", "add", name, "--display-name", "Ada Lovelace", "--password-stdin", stdin=PASSWORD)
    assert made.returncode == 0, made.stderr
    member = engram(server.env, "member", "add", name, "--tenant", tenant, "--role", role)
    assert member.returncode == 0, member.stderr
    return Person(name, PASSWORD)


def jwt_part(token: str, index: int) -> dict[str, Any]:
    """A JWT's header (0) or claims (1), unverified: the test only reads what the server wrote."""
    part = token.split(".")[index]
    return orjson.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))


class Flow:
    """One authorization by hand, to test each step's refusals."""

    def __init__(self, server: Server, person: Person, client_id: str, tenant: str = "") -> None:
        self.server = server
        self.person = person
        self.person_tenant = tenant
        self.client_id = client_id
        self.verifier = secrets.token_urlsafe(48)
        challenge = base64.urlsafe_b64encode(hashlib.sha256(self.verifier.encode()).digest()).rstrip(b"=").decode()
        self.params = {
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": REDIRECT,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "state": "s-" + secrets.token_hex(4),
            "resource": server.url,
            "scope": "memory:read memory:write",
        }

    def authorize_url(self, **changes: str | None) -> str:
        params = {k: v for k, v in {**self.params, **changes}.items() if v is not None}
        return f"{self.server.base}/authorize?{urlencode(params)}"

    async def code(self) -> str:
        await self.person.visit(self.authorize_url())
        assert self.person.redirect["state"] == self.params["state"]
        return self.person.redirect["code"]

    async def token(self, **form: str) -> httpx2.Response:
        data = {"client_id": self.client_id, **form}
        async with httpx2.AsyncClient() as http:
            return await http.post(f"{self.server.base}/token", data=data)

    async def exchange(self, code: str, verifier: str | None = None) -> httpx2.Response:
        return await self.token(
            grant_type="authorization_code",
            code=code,
            redirect_uri=REDIRECT,
            code_verifier=verifier or self.verifier,
            resource=self.server.url,
        )


async def register(server: Server, **metadata: Any) -> httpx2.Response:
    body = {"client_name": "Hand-made client", "redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none"}
    async with httpx2.AsyncClient() as http:
        return await http.post(f"{server.base}/register", json={**body, **metadata})


async def post_mcp(server: Server, token: str, message: dict[str, Any]) -> httpx2.Response:
    """One raw MCP request carrying `token`, to see the HTTP answer itself."""
    async with httpx2.AsyncClient() as http:
        return await http.post(server.url, content=orjson.dumps(message), headers=mcp_headers(token))


async def mcp_status(server: Server, token: str) -> int:
    """The HTTP status of an MCP request carrying `token` (200, or 401 when it is refused)."""
    return (await post_mcp(server, token, INITIALIZE)).status_code


async def until_refused(server: Server, token: str) -> bool:
    """Revocation reaches every replica within a few seconds: poll, don't sleep a fixed time."""
    for _ in range(40):
        if await mcp_status(server, token) == 401:
            return True
        await asyncio.sleep(0.25)
    return False
