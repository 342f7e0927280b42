"""Who is calling: built from a verified token only, never from arguments or headers."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from mcp.server.auth.provider import AccessToken

READ, WRITE, ADMIN = "memory:read", "memory:write", "memory:admin"


@dataclass(frozen=True, slots=True)
class Principal:
    subject: str
    client_id: str
    tenant: str
    scopes: frozenset[str]
    issuer: str

    @property
    def actor(self) -> str:
        """What history and authorship record as the author of a change."""
        return self.subject


def personal_tenant(issuer: str, subject: str) -> str:
    """A user's own tenant when the token names none: stable per (issuer, subject)."""
    return "u-" + hashlib.sha256(f"{issuer}\x00{subject}".encode()).hexdigest()[:32]


def principal_from_token(token: AccessToken, tenant_claim: str) -> Principal:
    claims: dict[str, Any] = token.claims or {}
    issuer = str(claims.get("iss", ""))
    subject = token.subject or token.client_id
    tenant = claims.get(tenant_claim)
    return Principal(
        subject=subject,
        client_id=token.client_id,
        tenant=str(tenant) if isinstance(tenant, str) and tenant else personal_tenant(issuer, subject),
        scopes=frozenset(token.scopes),
        issuer=issuer,
    )
