"""Who is calling: built from a verified token only, never from arguments or headers."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.errors import EngramError
from app.ids import SYSTEM, TENANT_KEY
from app.scopes import ADMIN as ADMIN  # re-exported: most modules name the scopes from here
from app.scopes import READ as READ
from app.scopes import WRITE as WRITE

if TYPE_CHECKING:  # the MCP SDK is seconds of imports: the CLI's account commands never load it
    from mcp.server.auth.provider import AccessToken


@dataclass(frozen=True, slots=True)
class Principal:
    subject: str
    client_id: str
    tenant: str
    scopes: frozenset[str]
    issuer: str
    # The operator's own work (the CLI's commands, the retention sweep): it sees every principal's
    # private memory. Never set from a token (principal_from_token leaves it False).
    operator: bool = False

    @property
    def actor(self) -> str:
        """What history records as the author of a change."""
        return self.subject

    @property
    def key(self) -> str:
        """Whose private memory this caller reads and writes (docs/private-memory.md): the
        principal's key, or SYSTEM for the operator's work."""
        return SYSTEM if self.operator else principal_key(self.issuer, self.subject)


def principal_key(issuer: str, subject: str) -> str:
    """A principal's private memory as the database names it: 32 hex digits of a digest of the
    verified token's issuer and subject (the same person through the console, a connector or a
    hook), a fixed form the transaction's opening can check."""
    return hashlib.sha256(f"engram-private\x00{issuer}\x00{subject}".encode()).hexdigest()[:32]


def personal_tenant(issuer: str, subject: str) -> str:
    """A user's own tenant when the token names none: stable per (issuer, subject)."""
    return "u-" + hashlib.sha256(f"{issuer}\x00{subject}".encode()).hexdigest()[:32]


def principal_from_token(token: AccessToken, tenant_claims: Sequence[str]) -> Principal:
    """The first of `tenant_claims` the token carries names the tenant; else the user's personal one.

    A claimed tenant id that is not 1-200 letters, digits and . _ : @ | - is `forbidden`.
    """
    claims: dict[str, Any] = token.claims or {}
    issuer = str(claims.get("iss", ""))
    subject = token.subject or token.client_id
    tenant = next((v for c in tenant_claims if isinstance(v := claims.get(c), str) and v), None)
    if tenant is not None and not TENANT_KEY.fullmatch(tenant):
        raise EngramError("forbidden", "the token's tenant id is not 1-200 letters, digits and . _ : @ | -")
    return Principal(
        subject=subject,
        client_id=token.client_id,
        tenant=tenant or personal_tenant(issuer, subject),
        scopes=frozenset(token.scopes),
        issuer=issuer,
    )
