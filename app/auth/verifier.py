"""Bearer-token verification for the MCP endpoints (the SDK's TokenVerifier protocol).

Three kinds of token reach it: Engram API keys; JWTs, checked against the issuer's keys
(signature with an asymmetric algorithm only, issuer, audience, expiry, not-before); and, when
introspection is configured, opaque tokens, asked about at the issuer (RFC 7662). The answer for
each token is cached until it expires (briefly for introspection), so a request costs one lookup.

`TokenVerifier` accepts a token meant for any endpoint of this server; `EndpointVerifier` is what
one endpoint uses: the same answer, refused unless the token's `aud` names that endpoint.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Container, Sequence
from contextvars import ContextVar
from typing import Any

import httpx2
from cachetools import TTLCache
from joserfc import jws, jwt
from joserfc.errors import JoseError
from mcp.server.auth.provider import AccessToken

from app.auth.apikey_checks import ApiKeys
from app.auth.apikeys import PREFIX
from app.auth.keys import Issuer, KeySource
from app.observability import metrics

logger = logging.getLogger(__name__)

# Asymmetric only: 'none' and HMAC (which a public key could be abused to forge) are refused.
ALGORITHMS = ("ES256", "ES384", "ES512", "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "EdDSA")
LEEWAY_SECONDS = 30
INTROSPECTION_CACHE_SECONDS = 60
CACHE_SIZE = 10_000
# One request verifies its token once: the scope check before the transport and the SDK's bearer
# middleware inside it share the answer (a context variable lives exactly as long as the request).
_VERIFIED: ContextVar[tuple[str, AccessToken | None] | None] = ContextVar("engram_verified", default=None)


class Introspection:
    """RFC 7662 token introspection with client credentials."""

    def __init__(self, issuer: Issuer, http: httpx2.AsyncClient, client_id: str, client_secret: str) -> None:
        self._issuer = issuer
        self._http = http
        self._auth = httpx2.BasicAuth(client_id, client_secret)

    async def __call__(self, token: str) -> dict[str, Any] | None:
        endpoint = (await self._issuer.discover()).get("introspection_endpoint")
        if not endpoint:
            return None
        try:
            response = await self._http.post(endpoint, data={"token": token}, auth=self._auth)
        except httpx2.HTTPError as exc:
            logger.warning("introspection failed: %s", type(exc).__name__)
            return None
        if response.status_code != 200:
            return None
        data = response.json()
        return data if data.get("active") is True else None


class TokenVerifier:
    def __init__(
        self,
        keys: KeySource,
        *,
        issuer: str,
        audiences: Sequence[str],
        scope_names: dict[str, str],
        api_keys: ApiKeys | None = None,
        introspection: Introspection | None = None,
        scope_claims: Sequence[str] = ("scope", "scp"),
        revoked: Container[str] = (),
        cache_seconds: float = 120,
    ) -> None:
        self._keys = keys
        self._issuer = issuer
        self._audiences = list(audiences)
        self._to_internal = {external: internal for internal, external in scope_names.items()}
        self._api_keys = api_keys
        self._introspection = introspection
        self._scope_claims = list(scope_claims)
        self._revoked = revoked  # grants (`sid`) revoked at the built-in authorization server
        self._claims = jwt.JWTClaimsRegistry(
            leeway=LEEWAY_SECONDS,
            iss={"essential": True, "value": issuer},
            aud={"essential": True, "values": self._audiences},
            exp={"essential": True},
            sub={"essential": True},
        )
        # A verified token is trusted this long at most, so a revocation at the issuer bites then.
        self._cache: TTLCache[str, AccessToken] = TTLCache(maxsize=CACHE_SIZE, ttl=max(cache_seconds, 0.001))

    async def verify_token(self, token: str) -> AccessToken | None:
        if token.startswith(PREFIX):
            by_key = await self._api_keys.verify(token) if self._api_keys else None
            if by_key is None:
                metrics.AUTH_FAILURES.labels("api_key").inc()
            return by_key
        memo = _VERIFIED.get()
        if memo is not None and memo[0] == token:  # the same request asked already (scope check, then SDK)
            return memo[1]
        hit = self._cache.get(token)
        if hit is not None and (hit.expires_at or 0) > time.time():
            found: AccessToken | None = None if self._is_revoked(hit) else hit
            _VERIFIED.set((token, found))
            return found
        found = await self._verify_jwt(token) if token.count(".") == 2 else await self._introspect(token)
        if found is not None:  # refusals are not cached: a key rotation may make the token good
            self._cache[token] = found
            found = None if self._is_revoked(found) else found
        _VERIFIED.set((token, found))
        return found

    def _is_revoked(self, token: AccessToken) -> bool:
        sid = (token.claims or {}).get("sid")
        if isinstance(sid, str) and sid in self._revoked:
            metrics.AUTH_FAILURES.labels("revoked").inc()
            return True
        return False

    async def _verify_jwt(self, token: str) -> AccessToken | None:
        try:
            header = jws.extract_compact(token.encode()).protected
            if header.get("alg") not in ALGORITHMS:
                raise JoseError(f"algorithm {header.get('alg')!r} is not accepted")
            if header.get("typ", "at+jwt").lower() not in ("at+jwt", "application/at+jwt", "jwt"):
                raise JoseError(f"token type {header.get('typ')!r} is not an access token")  # RFC 9068 section 4
            keys = await self._keys.key_set(header.get("kid"))
            decoded = jwt.decode(token, keys, algorithms=ALGORITHMS)
            self._claims.validate(decoded.claims)
        except (JoseError, ValueError, TypeError) as exc:
            reason = _reason(exc)
            metrics.AUTH_FAILURES.labels(reason).inc()
            logger.info("token refused: %s", reason)
            return None
        return self._access_token(token, decoded.claims)

    async def _introspect(self, token: str) -> AccessToken | None:
        if self._introspection is None:
            metrics.AUTH_FAILURES.labels("malformed").inc()
            return None
        data = await self._introspection(token)
        if data is None:
            metrics.AUTH_FAILURES.labels("inactive").inc()
            return None
        if data.get("iss") not in (None, self._issuer):
            return None
        aud = data.get("aud")  # required: a token for another service must not be accepted here
        if not isinstance(aud, str | list) or not set([aud] if isinstance(aud, str) else aud) & set(self._audiences):
            metrics.AUTH_FAILURES.labels("claims").inc()
            return None
        exp = data.get("exp")
        now = int(time.time())
        if isinstance(exp, int) and exp <= now:
            return None
        # Cache an introspection answer briefly: the issuer may revoke the token at any time.
        claims = {
            "iss": self._issuer,
            **data,
            "exp": min(exp or now + INTROSPECTION_CACHE_SECONDS, now + INTROSPECTION_CACHE_SECONDS),
        }
        if "sub" not in claims:
            return None
        return self._access_token(token, claims)

    def _access_token(self, token: str, claims: dict[str, Any]) -> AccessToken:
        scopes: list[str] = []
        for name in self._scope_claims:  # `scope` (RFC 9068), `scp` (Okta, Entra), `permissions` (Auth0)
            value = claims.get(name)
            if isinstance(value, str):
                scopes += value.split()
            elif isinstance(value, list):
                scopes += [v for v in value if isinstance(v, str)]
        return AccessToken(
            token=token,
            client_id=str(claims.get("client_id") or claims.get("azp") or claims["sub"]),
            scopes=sorted({self._to_internal[s] for s in scopes if s in self._to_internal}),
            expires_at=int(claims["exp"]),
            resource=self._audiences[0],
            subject=str(claims["sub"]),
            claims=claims,
        )


class EndpointVerifier:
    """One endpoint's verifier: a JWT or introspected token must name one of `audiences` in `aud`
    (RFC 8707: a token for /mcp/memory is no good at /mcp). API keys are the tenant's own
    credentials, not issued for a resource, and work at every endpoint."""

    def __init__(self, verifier: TokenVerifier, audiences: Sequence[str]) -> None:
        self._verifier = verifier
        self.audiences = list(audiences)

    async def verify_token(self, token: str) -> AccessToken | None:
        found = await self._verifier.verify_token(token)
        if found is None or token.startswith(PREFIX):
            return found
        aud = (found.claims or {}).get("aud")
        named = {aud} if isinstance(aud, str) else set(aud) if isinstance(aud, list) else set()
        if not named & set(self.audiences):
            metrics.AUTH_FAILURES.labels("audience").inc()
            logger.info("token refused: meant for another endpoint")
            return None
        return found.model_copy(update={"resource": self.audiences[0]})


_REASONS = {
    "ExpiredTokenError": "expired",
    "InvalidTokenError": "not_yet_valid",
    "BadSignatureError": "bad_signature",
    "InvalidClaimError": "claims",
    "MissingClaimError": "claims",
    "DecodeError": "malformed",
    "UnsupportedAlgorithmError": "algorithm",
    "InvalidKeyIdError": "unknown_key",
    "MissingKeyError": "unknown_key",
}


def _reason(exc: Exception) -> str:
    """A bounded label for why a token was refused."""
    name = type(exc).__name__
    if name in _REASONS:
        return _REASONS[name]
    return "unknown_key" if "key" in str(exc).lower() else "invalid"
