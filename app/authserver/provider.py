"""The authorization server's grant logic, behind the SDK's `OAuthAuthorizationServerProvider`.

A grant is a *family*: the consent of one user, for one client, on one tenant, with its scopes.
Its authorization code is single-use and short-lived; its refresh tokens rotate on every use, and
a refresh token (or code) presented twice revokes the whole family (RFC 9700 section 4.14).
Access tokens are JWTs naming the family (`sid`), so revoking a family ends them too.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

from joserfc import jwt
from joserfc.errors import JoseError
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    AuthorizeError,
    OAuthAuthorizationServerProvider,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from app.authserver.clients import Clients, EngramClient
from app.authserver.credentials import digest, new_secret
from app.authserver.events import Events
from app.authserver.signing import SigningKeys
from app.scopes import ADMIN, READ, WRITE
from app.store import oauth
from app.store.accounts import Membership, User
from app.store.database import Database

logger = logging.getLogger(__name__)

# What each role may be granted, by Engram's own scope names.
ROLE_SCOPES = {
    "reader": (READ,),
    "writer": (READ, WRITE),
    "admin": (READ, WRITE, ADMIN),
}


class Code(AuthorizationCode):
    family_id: str
    used: bool


class Refresh(RefreshToken):
    family_id: str
    used: bool


GRANT_RETENTION = timedelta(days=30)  # far beyond any access token's lifetime (at most a day)


@dataclass(frozen=True, slots=True)
class Lifetimes:
    access: int = 600
    refresh: int = 30 * 86400
    code: int = 60
    request: int = 600


class Provider(OAuthAuthorizationServerProvider[Code, Refresh, AccessToken]):
    """Implements the SDK's provider protocol (its default refuses the identity-assertion grant,
    which Engram does not offer); the consent page calls `approve` and `deny`."""

    def __init__(
        self,
        db: Database,
        clients: Clients,
        keys: SigningKeys,
        events: Events,
        *,
        issuer: str,
        resources: Sequence[str],
        consent_url: str,
        scope_names: Mapping[str, str],
        tenant_claim: str,
        lifetimes: Lifetimes,
    ) -> None:
        self._db = db
        self.clients = clients
        self._keys = keys
        self._events = events
        self.issuer = issuer
        self.resources = list(resources)  # the served MCP endpoints' URLs: what a token may be for
        self._consent_url = consent_url
        self._external = dict(scope_names)  # Engram name -> the name tokens carry
        self._tenant_claim = tenant_claim
        self.lifetimes = lifetimes

    # --- clients ------------------------------------------------------------------------------

    async def get_client(self, client_id: str) -> EngramClient | None:
        return await self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        await self.clients.register(client_info)
        await self._events("register", "ok", client_id=client_info.client_id, detail=client_info.client_name or "")

    # --- authorization ----------------------------------------------------------------------------

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        served = ", ".join(self.resources)
        if params.resource is None:
            await self._events("authorize", "no_resource", client_id=client.client_id)
            raise AuthorizeError("invalid_request", f"`resource` is required, one of: {served}")
        resource = params.resource.rstrip("/")
        if resource not in self.resources:
            await self._events("authorize", "wrong_resource", client_id=client.client_id)
            raise AuthorizeError("invalid_target", f"this server issues tokens for these resources only: {served}")
        request_id, id_hash = new_secret()
        stored = {
            "state": params.state,
            "scopes": params.scopes,
            "code_challenge": params.code_challenge,
            "redirect_uri": str(params.redirect_uri),
            "redirect_uri_explicit": params.redirect_uri_provided_explicitly,
            "resource": resource,  # the token's `aud`: good at that endpoint only
        }
        await self._db.run(
            oauth.save_request, id_hash, client.client_id, stored, timedelta(seconds=self.lifetimes.request)
        )
        return f"{self._consent_url}?{urlencode({'request': request_id})}"

    async def pending(self, request_id: str) -> tuple[EngramClient, dict[str, Any]] | None:
        """An authorization request still waiting for the user, with its client."""
        found = await self._db.run(oauth.pending_request, digest(request_id))
        if found is None:
            return None
        client = await self.clients.get(found[0])
        return (client, found[1]) if client else None

    def grantable(self, asked: Sequence[str] | None, role: str) -> list[str]:
        """The scopes a token may carry: those asked for (read and write if none) that the role allows."""
        allowed = [self._external[s] for s in ROLE_SCOPES[role]]
        wanted = asked if asked is not None else [self._external[READ], self._external[WRITE]]
        return [s for s in allowed if s in wanted]

    async def remember(self, user: User, client_id: str, tenant: str, scopes: Sequence[str]) -> None:
        await self._db.run(oauth.remember_consent, user.id, client_id, tenant, scopes)

    async def remembered(
        self, user: User, client_id: str, memberships: Sequence[Membership], asked: Sequence[str] | None
    ) -> tuple[str, list[str]] | None:
        """A remembered consent that still covers this request: one tenant, scopes its role allows."""
        roles = {m.tenant: m.role for m in memberships}
        for tenant, scopes in await self._db.run(oauth.consents, user.id, client_id):
            if tenant not in roles:
                continue
            granted = self.grantable(asked, roles[tenant])
            if granted and set(granted) <= set(scopes):
                return tenant, granted
        return None

    async def approve(self, request_id: str, user: User, tenant: str, scopes: Sequence[str]) -> str | None:
        """Issues the code for an approved request; the redirect URL, or None if the request is gone."""
        found = await self._db.run(oauth.take_request, digest(request_id))
        if found is None:
            return None
        client_id, params = found
        code, code_hash = new_secret()
        await self._db.run(
            oauth.grant,
            client_id=client_id,
            user_id=user.id,
            tenant=tenant,
            scopes=scopes,
            resource=params["resource"],
            code_hash=code_hash,
            code_challenge=params["code_challenge"],
            redirect_uri=params["redirect_uri"],
            redirect_uri_explicit=params["redirect_uri_explicit"],
            code_ttl=timedelta(seconds=self.lifetimes.code),
        )
        await self._events(
            "consent", "ok", user_id=user.id, client_id=client_id, tenant=tenant, detail=" ".join(scopes)
        )
        return construct_redirect_uri(params["redirect_uri"], code=code, state=params["state"], iss=self.issuer)

    async def deny(self, request_id: str, user: User | None, why: str = "access_denied") -> str | None:
        found = await self._db.run(oauth.take_request, digest(request_id))
        if found is None:
            return None
        client_id, params = found
        await self._events("consent", "denied", user_id=user.id if user else None, client_id=client_id, detail=why)
        return construct_redirect_uri(
            params["redirect_uri"], error="access_denied", error_description=why, state=params["state"], iss=self.issuer
        )

    # --- tokens -------------------------------------------------------------------------------------

    async def load_authorization_code(self, client: OAuthClientInformationFull, authorization_code: str) -> Code | None:
        found = await self._db.run(oauth.code, digest(authorization_code))
        if found is None or found.family.client_id != client.client_id:
            await self._events("token", "unknown_code", client_id=client.client_id)
            return None
        return Code(
            code=authorization_code,
            scopes=found.family.scopes,
            expires_at=found.expires_at.timestamp(),
            client_id=found.family.client_id,
            code_challenge=found.code_challenge,
            redirect_uri=found.redirect_uri,
            redirect_uri_provided_explicitly=found.redirect_uri_explicit,
            resource=found.family.resource,
            subject=found.family.user_id,
            family_id=found.family.id,
            used=found.used,
        )

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: Code
    ) -> OAuthToken:
        if not await self._db.run(oauth.use_code, digest(authorization_code.code)):
            await self._db.run(oauth.revoke_family, authorization_code.family_id, "code reused")
            await self._events("token", "code_reused", client_id=client.client_id)
            raise TokenError("invalid_grant", "authorization code was already used")
        token = await self._issue(authorization_code.family_id, None)
        if token is None:  # revoked between the code's issue and its exchange
            raise TokenError("invalid_grant", "this grant was revoked")
        return token

    async def load_refresh_token(self, client: OAuthClientInformationFull, refresh_token: str) -> Refresh | None:
        found = await self._db.run(oauth.refresh, digest(refresh_token))
        if found is None or found.family.client_id != client.client_id or found.family.revoked:
            await self._events("refresh", "unknown_token", client_id=client.client_id)
            return None
        return Refresh(
            token=refresh_token,
            client_id=found.family.client_id,
            scopes=found.family.scopes,
            expires_at=int(found.expires_at.timestamp()),
            resource=found.family.resource,
            subject=found.family.user_id,
            family_id=found.family.id,
            used=found.used,
        )

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: Refresh, scopes: list[str]
    ) -> OAuthToken:
        token = await self._issue(refresh_token.family_id, digest(refresh_token.token), scopes)
        if token is None:
            await self._db.run(oauth.revoke_family, refresh_token.family_id, "refresh token reused")
            await self._events("refresh", "reused", client_id=client.client_id)
            raise TokenError("invalid_grant", "refresh token was already used; every token of this grant is revoked")
        return token

    async def _issue(
        self, family_id: str, replaces: bytes | None, scopes: Sequence[str] | None = None
    ) -> OAuthToken | None:
        """An access token and the family's next refresh token; None if `replaces` was used already."""
        refresh, refresh_hash = new_secret()
        lifetime = timedelta(seconds=self.lifetimes.refresh)
        family = await self._db.run(oauth.rotate_refresh, replaces, refresh_hash, family_id, lifetime)
        if family is None:
            return None
        granted = [s for s in family.scopes if scopes is None or s in scopes]
        now = int(time.time())
        access = await self._keys.sign(
            {
                "iss": self.issuer,
                "aud": family.resource,
                "sub": family.user_id,
                "client_id": family.client_id,
                self._tenant_claim: family.tenant,
                "scope": " ".join(granted),
                "sid": family.id,
                "iat": now,
                "nbf": now,
                "exp": now + self.lifetimes.access,
                "jti": uuid.uuid4().hex,
            }
        )
        flow = "refresh" if replaces else "token"
        await self._events(flow, "ok", user_id=family.user_id, client_id=family.client_id, tenant=family.tenant)
        return OAuthToken(
            access_token=access,
            expires_in=self.lifetimes.access,
            scope=" ".join(granted),
            refresh_token=refresh,
        )

    async def sweep(self, unused_clients: timedelta) -> None:
        """Removes expired requests, codes, tokens and sessions, registrations never used, and grants
        ended for longer than GRANT_RETENTION (kept that long for the audit trail and the listings)."""
        await self._db.run(oauth.sweep, unused_clients, GRANT_RETENTION)

    async def revoke(self, client: EngramClient, token: str) -> None:
        """RFC 7009: a refresh token (or an access token naming its family) revokes its family."""
        found = await self._db.run(oauth.refresh, digest(token))
        family_id = found.family.id if found and found.family.client_id == client.client_id else None
        if family_id is None and token.count(".") == 2:
            family_id = await self._family_of_access_token(token, client.client_id)
        if family_id is not None:
            await self._db.run(oauth.revoke_family, family_id, "revoked by client")
        await self._events("revoke", "ok" if family_id else "unknown_token", client_id=client.client_id)

    async def _family_of_access_token(self, token: str, client_id: str) -> str | None:
        try:
            decoded = jwt.decode(token, await self._keys.key_set(None), algorithms=["ES256"])
        except (JoseError, ValueError):
            return None
        claims = decoded.claims
        return claims.get("sid") if claims.get("client_id") == client_id and claims.get("iss") == self.issuer else None

    # The SDK's revocation and bearer paths are replaced by Engram's own; these complete the protocol.
    async def load_access_token(self, token: str) -> AccessToken | None:
        return None

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        return None
