"""A stand-in identity provider for the tests: a real HTTP server on loopback with OpenID discovery,
a JWKS whose keys can be rotated, an authorization endpoint that approves at once (with PKCE),
a token endpoint, and RFC 7662 introspection."""

from __future__ import annotations

import base64
import hashlib
import secrets
import time
import uuid
from typing import Any
from urllib.parse import urlencode

from joserfc import jwt
from joserfc.jwk import ECKey, RSAKey
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from tests.support.local_http import ThreadedServer
from tests.support.server import free_port

CLIENT_ID = "engram-tests"
CLIENT_SECRET = "introspection-secret"


class StandInIssuer:
    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.keys: list[ECKey | RSAKey] = [ECKey.generate_key("P-256", auto_kid=True)]
        self.jwks_fetches = 0
        self.opaque: dict[str, dict[str, Any]] = {}  # token -> introspection answer
        self.codes: dict[str, dict[str, Any]] = {}
        self.audience = ""  # what /token puts in `aud`; set by the test to the resource URL
        self.claims: dict[str, Any] = {}  # extra claims /token adds
        # Who signs in when Engram sends a person here to sign in (an ID token is issued for `openid`).
        self.person: dict[str, Any] = {"sub": "upstream-user-1", "email": "ada@example.com", "name": "Ada"}
        app = Starlette(
            routes=[
                Route("/.well-known/openid-configuration", self.discovery),
                Route("/jwks", self.jwks),
                Route("/authorize", self.authorize),
                Route("/token", self.token_endpoint, methods=["POST"]),
                Route("/introspect", self.introspect, methods=["POST"]),
            ]
        )
        self._server = ThreadedServer(app, self.port)

    def __enter__(self) -> StandInIssuer:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop()

    # --- minting ---------------------------------------------------------------------------

    def sign(self, claims: dict[str, Any], key: ECKey | RSAKey | None = None, header: dict | None = None) -> str:
        key = key or self.keys[0]
        alg = "ES256" if isinstance(key, ECKey) else "RS256"
        return jwt.encode({"alg": alg, "kid": key.kid, **(header or {})}, claims, key)

    def claims_for(self, audience: str, tenant: str, scope: str = "memory:read memory:write", **extra: Any) -> dict:
        now = int(time.time())
        return {
            "iss": self.url,
            "aud": audience,
            "sub": "user-1",
            "client_id": CLIENT_ID,
            "tenant_id": tenant,
            "scope": scope,
            "iat": now,
            "nbf": now,
            "exp": now + 600,
            "jti": str(uuid.uuid4()),
            **extra,
        }

    def rotate(self) -> ECKey:
        """A new signing key takes over; the old one leaves the JWKS."""
        self.keys = [ECKey.generate_key("P-256", auto_kid=True)]
        return self.keys[0]

    # --- endpoints ---------------------------------------------------------------------------

    async def discovery(self, request: Request) -> Response:
        return JSONResponse(
            {
                "issuer": self.url,
                "jwks_uri": f"{self.url}/jwks",
                "authorization_endpoint": f"{self.url}/authorize",
                "token_endpoint": f"{self.url}/token",
                "introspection_endpoint": f"{self.url}/introspect",
                "response_types_supported": ["code"],
                "grant_types_supported": ["authorization_code"],
                "code_challenge_methods_supported": ["S256"],
                "token_endpoint_auth_methods_supported": ["none", "client_secret_basic"],
                "id_token_signing_alg_values_supported": ["ES256", "RS256"],
                "subject_types_supported": ["public"],
                "authorization_response_iss_parameter_supported": True,
            }
        )

    async def jwks(self, request: Request) -> Response:
        self.jwks_fetches += 1
        return JSONResponse({"keys": [{**k.as_dict(private=False), "use": "sig"} for k in self.keys]})

    async def authorize(self, request: Request) -> Response:
        q = request.query_params
        if q.get("client_id") != CLIENT_ID or q.get("code_challenge_method") != "S256":
            return JSONResponse({"error": "invalid_request"}, status_code=400)
        code = secrets.token_urlsafe(16)
        self.codes[code] = {
            "challenge": q["code_challenge"],
            "resource": q.get("resource"),
            "scope": q.get("scope"),
            "nonce": q.get("nonce"),
        }
        target = f"{q['redirect_uri']}?{urlencode({'code': code, 'state': q['state'], 'iss': self.url})}"
        return RedirectResponse(target, status_code=302)

    async def token_endpoint(self, request: Request) -> Response:
        form = await request.form()
        grant = self.codes.pop(str(form.get("code")), None)
        verifier = str(form.get("code_verifier", ""))
        digest = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        if grant is None or digest != grant["challenge"]:
            return JSONResponse({"error": "invalid_grant"}, status_code=400)
        claims = self.claims_for(grant["resource"] or self.audience, "oauth-tenant", **self.claims)
        answer = {"access_token": self.sign(claims), "token_type": "Bearer", "expires_in": 600}
        answer["scope"] = claims["scope"]
        if "openid" in (grant["scope"] or "").split():
            now = int(time.time())
            identity = {"iss": self.url, "aud": CLIENT_ID, "iat": now, "exp": now + 300, "nonce": grant["nonce"]}
            answer["id_token"] = self.sign({**identity, **self.person, "email_verified": True})
        return JSONResponse(answer)

    async def introspect(self, request: Request) -> Response:
        expected = base64.b64encode(f"{CLIENT_ID}:{CLIENT_SECRET}".encode()).decode()
        if request.headers.get("authorization") != f"Basic {expected}":
            return JSONResponse({"error": "invalid_client"}, status_code=401)
        form = await request.form()
        return JSONResponse(self.opaque.get(str(form.get("token")), {"active": False}))
