"""Bearer-token verification for the MCP endpoint (the SDK's TokenVerifier protocol)."""

from __future__ import annotations

import logging

from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet
from mcp.server.auth.provider import AccessToken

logger = logging.getLogger(__name__)

# Asymmetric only: 'none' and HMAC (which a public key could be abused to forge) are refused.
ALGORITHMS = ("ES256", "ES384", "RS256", "RS384", "RS512", "PS256", "EdDSA")
LEEWAY_SECONDS = 30


class JwtVerifier:
    """Checks signature, issuer, audience, expiry and not-before against a known key set."""

    def __init__(self, keys: KeySet, *, issuer: str, audience: str) -> None:
        self._keys = keys
        self._issuer = issuer
        self._audience = audience
        self._claims = jwt.JWTClaimsRegistry(
            leeway=LEEWAY_SECONDS,
            iss={"essential": True, "value": issuer},
            aud={"essential": True, "value": audience},
            exp={"essential": True},
            sub={"essential": True},
        )

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            decoded = jwt.decode(token, self._keys, algorithms=ALGORITHMS)
            self._claims.validate(decoded.claims)
        except (JoseError, ValueError) as exc:
            logger.info("token refused: %s", type(exc).__name__)
            return None
        claims = decoded.claims
        scope = claims.get("scope", "")
        return AccessToken(
            token=token,
            client_id=str(claims.get("client_id") or claims.get("azp") or claims["sub"]),
            scopes=scope.split() if isinstance(scope, str) else [],
            expires_at=int(claims["exp"]),
            resource=self._audience,
            subject=str(claims["sub"]),
            claims=claims,
        )
