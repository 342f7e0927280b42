"""The development issuer: a signing key kept on disk, its JWKS, and tokens minted by `engram token`.

Tokens are real ES256 JWTs, verified by the same code path as any other issuer's.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import orjson
from joserfc import jwt
from joserfc.jwk import ECKey

from app.config import Settings
from app.scopes import READ, WRITE

ALGORITHM = "ES256"


def load_or_create_key(path: Path) -> ECKey:
    if path.exists():
        return ECKey.import_key(orjson.loads(path.read_bytes()))
    key = ECKey.generate_key("P-256", auto_kid=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(orjson.dumps(key.as_dict(private=True)))
    return key


def public_jwks(key: ECKey) -> dict[str, object]:
    return {"keys": [{**key.as_dict(private=False), "alg": ALGORITHM, "use": "sig"}]}


def mint_token(
    settings: Settings,
    *,
    tenant: str,
    subject: str = "dev-user",
    scopes: tuple[str, ...] = (READ, WRITE),
    ttl: int | None = None,
    key: ECKey | None = None,
    audience: str | list[str] | None = None,
) -> str:
    """A development token; its `aud` names every served endpoint unless `audience` says otherwise."""
    key = key or load_or_create_key(settings.dev_key_file)
    now = int(time.time())
    claims = {
        "iss": settings.issuer,
        "aud": audience if audience is not None else list(settings.endpoint_urls.values()),
        "sub": subject,
        "client_id": "engram-cli",
        settings.tenant_claim: tenant,
        "scope": " ".join(scopes),
        "iat": now,
        "nbf": now,
        "exp": now + (ttl or settings.token_ttl_seconds),
        "jti": str(uuid.uuid4()),
    }
    return jwt.encode({"alg": ALGORITHM, "kid": key.kid, "typ": "at+jwt"}, claims, key)
