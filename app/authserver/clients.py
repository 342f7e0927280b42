"""OAuth clients: registered dynamically (RFC 7591), configured by an operator, or identified by
the URL of their metadata document. Redirect URIs match exactly, except that a loopback redirect
may use any port (RFC 8252 section 7.3): native apps listen on whatever port is free."""

from __future__ import annotations

import base64
import hmac
import logging
from collections.abc import Sequence
from typing import Any
from urllib.parse import unquote, urlsplit

from mcp.server.auth.middleware.client_auth import AuthenticationError, ClientAuthenticator
from mcp.server.auth.provider import RegistrationError
from mcp.shared.auth import InvalidRedirectUriError, InvalidScopeError, OAuthClientInformationFull
from pydantic import AnyUrl
from starlette.requests import Request

from app.auth.cimd import ClientDocumentError, ClientDocuments
from app.authserver.credentials import digest
from app.store import oauth
from app.store.database import Database

logger = logging.getLogger(__name__)
_LOOPBACK = {"127.0.0.1", "[::1]", "::1", "localhost"}
MAX_REDIRECT_URIS = 10
MAX_TEXT = 200
MAX_URL = 2000


def _without_port(uri: str) -> tuple[str, ...] | None:
    """A loopback http URI with its port taken out; None for any other URI."""
    parts = urlsplit(uri)
    if parts.scheme != "http" or parts.hostname not in _LOOPBACK:
        return None
    return (parts.scheme, parts.hostname, parts.path, parts.query)


class EngramClient(OAuthClientInformationFull):
    """A client as the SDK's handlers see it, with Engram's matching rules."""

    def validate_redirect_uri(self, redirect_uri: AnyUrl | None) -> AnyUrl:
        if redirect_uri is None:
            return super().validate_redirect_uri(None)
        asked = str(redirect_uri)
        for registered in self.redirect_uris or []:
            if asked == str(registered):
                return redirect_uri
            loopback = _without_port(str(registered))
            if loopback is not None and loopback == _without_port(asked):
                return redirect_uri
        raise InvalidRedirectUriError("redirect_uri is not registered for this client")

    def validate_scope(self, requested_scope: str | None) -> list[str] | None:
        """Any subset of the scopes the client registered (`Clients` fills in all when it named none)."""
        if requested_scope is None:
            return None
        asked = requested_scope.split()
        allowed = set((self.scope or "").split())
        if unknown := [s for s in asked if s not in allowed]:
            raise InvalidScopeError(f"scope not allowed for this client: {' '.join(unknown)}")
        return asked


def check_metadata(info: OAuthClientInformationFull) -> None:
    """Bounds on what a client may register: few, absolute, safe redirect URIs and short texts."""
    uris = [str(u) for u in info.redirect_uris or []]
    if not uris or len(uris) > MAX_REDIRECT_URIS:
        raise RegistrationError("invalid_redirect_uri", f"between 1 and {MAX_REDIRECT_URIS} redirect_uris")
    for uri in uris:
        parts = urlsplit(uri)
        if len(uri) > MAX_URL or "\x00" in uri or parts.fragment:
            raise RegistrationError("invalid_redirect_uri", "redirect URIs are at most 2000 characters, no fragment")
        if parts.scheme in ("javascript", "data", "file", "vbscript", "about", "blob"):
            raise RegistrationError("invalid_redirect_uri", f"scheme {parts.scheme!r} is not allowed")
        if parts.scheme == "http" and parts.hostname not in _LOOPBACK:
            raise RegistrationError("invalid_redirect_uri", "http redirect URIs must be loopback; use https")
    for name in ("client_name", "software_id", "software_version", "scope"):
        value = getattr(info, name)
        if value is not None and (len(value) > MAX_TEXT or "\x00" in value):
            raise RegistrationError("invalid_client_metadata", f"{name} is at most {MAX_TEXT} characters")
    for name in ("client_uri", "logo_uri", "tos_uri", "policy_uri", "jwks_uri"):
        value = getattr(info, name)
        if value is not None and len(str(value)) > MAX_URL:
            raise RegistrationError("invalid_client_metadata", f"{name} is at most {MAX_URL} characters")
    if info.contacts is not None and (len(info.contacts) > 5 or any(len(c) > MAX_TEXT for c in info.contacts)):
        raise RegistrationError("invalid_client_metadata", "at most 5 contacts")
    if info.jwks is not None:
        raise RegistrationError("invalid_client_metadata", "jwks is not supported")
    if info.token_endpoint_auth_method not in (None, "none", "client_secret_post", "client_secret_basic"):
        raise RegistrationError("invalid_client_metadata", "token_endpoint_auth_method is not supported")


class Clients(ClientAuthenticator):
    """Finds clients by id: registered ones in the database, metadata documents by fetching them;
    the SDK's token endpoint authenticates them here (against hashed secrets, not the SDK's store)."""

    def __init__(self, db: Database, scopes: Sequence[str], documents: ClientDocuments | None = None) -> None:
        self._scopes = " ".join(scopes)
        self._db = db
        self._documents = documents
        self._first_party: dict[str, EngramClient] = {}

    def add_first_party(self, client_id: str, name: str, redirect_uri: str) -> None:
        """A client that is part of this server (the console): public, known without registration,
        its one redirect URI fixed by the server's own public URL."""
        self._first_party[client_id] = self._client(
            {
                "client_id": client_id,
                "client_name": name,
                "redirect_uris": [redirect_uri],
                "token_endpoint_auth_method": "none",
                "grant_types": ["authorization_code", "refresh_token"],
            }
        )

    def is_first_party(self, client_id: str) -> bool:
        return client_id in self._first_party

    async def get(self, client_id: str) -> EngramClient | None:
        if len(client_id) > MAX_URL or "\x00" in client_id:
            return None
        if client_id in self._first_party:
            return self._first_party[client_id]
        if client_id.startswith("https://") or client_id.startswith("http://"):
            if self._documents is None:
                return None
            try:
                found = await self._documents.fetch(client_id)
            except ClientDocumentError as refused:
                logger.info("client metadata document refused: %s", refused.reason)
                return None
            return self._client(found.model_dump(exclude_none=True))
        row = await self._db.run(oauth.client, client_id)
        return self._client({**row.metadata, "client_id": row.client_id}) if row else None

    def _client(self, metadata: dict[str, Any]) -> EngramClient:
        return EngramClient.model_validate({"scope": self._scopes, **metadata})

    async def register(self, info: OAuthClientInformationFull, kind: str = "dynamic") -> None:
        check_metadata(info)
        secret_hash = digest(info.client_secret) if info.client_secret else None
        metadata = info.model_dump(mode="json", exclude_none=True, exclude={"client_secret", "client_id"})
        await self._db.run(oauth.add_client, info.client_id, kind, metadata, secret_hash)

    async def authenticate_request(self, request: Request) -> EngramClient:
        """The SDK's client authentication, against hashed secrets (`none` for public clients)."""
        form = await request.form()
        client_id = form.get("client_id")
        if not isinstance(client_id, str) or not client_id:
            raise AuthenticationError("missing client_id")
        client = await self.get(client_id)
        if client is None:
            raise AuthenticationError("unknown client")
        method = client.token_endpoint_auth_method or "none"
        if method == "none":
            return client
        secret = form.get("client_secret") if method == "client_secret_post" else _basic_secret(request, client_id)
        stored = await self._db.run(oauth.client, client_id)
        if not isinstance(secret, str) or stored is None or stored.secret_hash is None:
            raise AuthenticationError("client authentication failed")
        if not hmac.compare_digest(digest(secret), stored.secret_hash):
            raise AuthenticationError("client authentication failed")
        return client


def _basic_secret(request: Request, client_id: str) -> str | None:
    header = request.headers.get("authorization", "")
    if not header.lower().startswith("basic "):
        return None
    try:
        user, _, secret = base64.b64decode(header[6:]).decode().partition(":")
    except (ValueError, UnicodeDecodeError):
        return None
    return unquote(secret) if unquote(user) == client_id else None


def public_view(client: EngramClient) -> dict[str, Any]:
    """What the consent page shows of a client."""
    hosts = sorted({urlsplit(str(u)).netloc or urlsplit(str(u)).scheme for u in client.redirect_uris or []})
    return {"name": client.client_name or client.client_id, "id": client.client_id, "redirect_hosts": hosts}
