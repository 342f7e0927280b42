"""Where token-signing keys come from: a fixed set (dev mode) or an issuer's JWKS (OIDC).

The issuer's metadata is found by OpenID Connect discovery or RFC 8414; its JWKS is fetched
asynchronously, cached, and fetched again when it expires or when a token names an unknown key
id, at most once per `min_refresh` seconds, so a flood of made-up key ids cannot hammer the
identity provider.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Protocol
from urllib.parse import urlsplit

import httpx2
from joserfc.jwk import KeySet

from app.observability import metrics

logger = logging.getLogger(__name__)


class KeySource(Protocol):
    async def key_set(self, kid: str | None) -> KeySet: ...


class StaticKeys:
    def __init__(self, keys: KeySet) -> None:
        self._keys = keys

    async def key_set(self, kid: str | None) -> KeySet:
        return self._keys


class DiscoveryError(RuntimeError):
    pass


def fetch_failure(exc: Exception) -> str:
    """The bounded reason a fetch failed, for `engram_auth_fetch_failures_total`."""
    if isinstance(exc, httpx2.HTTPStatusError):
        return "http_status"
    if isinstance(exc, httpx2.TimeoutException):
        return "timeout"
    if isinstance(exc, httpx2.HTTPError):
        return "unreachable"
    return "invalid"


def metadata_urls(issuer: str) -> list[str]:
    """Where an issuer's metadata may be: OpenID Connect discovery, then RFC 8414 (path inserted)."""
    parts = urlsplit(issuer)
    base = f"{parts.scheme}://{parts.netloc}"
    path = parts.path.rstrip("/")
    return [
        f"{issuer.rstrip('/')}/.well-known/openid-configuration",
        f"{base}/.well-known/oauth-authorization-server{path}",
        f"{base}/.well-known/openid-configuration{path}",
    ]


class Issuer:
    """One identity provider: its metadata and its keys."""

    def __init__(
        self, issuer: str, http: httpx2.AsyncClient, *, jwks_url: str | None, min_refresh: float, max_age: float
    ) -> None:
        self.issuer = issuer
        self._http = http
        self._jwks_url = jwks_url
        self._min_refresh = min_refresh
        self._max_age = max_age
        self._keys = KeySet([])
        self._fetched_at = 0.0  # monotonic time of the last fetch attempt
        self._expires_at = 0.0
        self._lock = asyncio.Lock()
        self.metadata: dict[str, Any] = {}

    async def discover(self) -> dict[str, Any]:
        if self.metadata:
            return self.metadata
        failure = "http_status"
        for url in metadata_urls(self.issuer):
            try:
                response = await self._http.get(url)
            except httpx2.HTTPError as exc:
                failure = fetch_failure(exc)
                continue
            if response.status_code != 200:
                continue
            try:
                data = response.json()
            except ValueError:
                metrics.AUTH_FETCH_FAILURES.labels("discovery", "invalid").inc()
                raise
            if data.get("issuer") != self.issuer:  # RFC 8414 section 3.3: must match exactly
                metrics.AUTH_FETCH_FAILURES.labels("discovery", "invalid").inc()
                raise DiscoveryError(f"metadata at {url} names issuer {data.get('issuer')!r}, not {self.issuer!r}")
            self.metadata = data
            return data
        metrics.AUTH_FETCH_FAILURES.labels("discovery", failure).inc()
        raise DiscoveryError(f"no OAuth/OIDC metadata found for issuer {self.issuer}")

    async def key_set(self, kid: str | None) -> KeySet:
        now = time.monotonic()
        known = kid is None or any(k.kid == kid for k in self._keys)
        if now < self._expires_at and known:
            return self._keys
        async with self._lock:
            now = time.monotonic()
            known = kid is None or any(k.kid == kid for k in self._keys)
            stale = now >= self._expires_at
            if (stale or not known) and now - self._fetched_at >= self._min_refresh:
                await self._fetch()
        return self._keys

    async def _fetch(self) -> None:
        self._fetched_at = time.monotonic()
        try:
            url = self._jwks_url or (await self.discover()).get("jwks_uri")
            if not url:
                metrics.AUTH_FETCH_FAILURES.labels("discovery", "invalid").inc()
                raise DiscoveryError("the issuer's metadata has no jwks_uri")
        except (DiscoveryError, ValueError) as exc:  # counted where discovery failed
            logger.warning("could not fetch the issuer's keys: %s", exc)
            return
        try:
            response = await self._http.get(url)
            response.raise_for_status()
            self._keys = KeySet.import_key_set(response.json())
            self._expires_at = self._fetched_at + self._max_age
        except (httpx2.HTTPError, ValueError) as exc:
            metrics.AUTH_FETCH_FAILURES.labels("jwks", fetch_failure(exc)).inc()
            logger.warning("could not fetch the issuer's keys: %s", exc)
