"""OAuth Client ID Metadata Documents: an `https` URL used as a `client_id` names a JSON document
that describes the client (draft-ietf-oauth-client-id-metadata-document; MCP 2025-11-25).

Whoever starts an authorization request chooses that URL, unauthenticated, so fetching it is a
server-side request forgery risk. `ClientDocuments.fetch` therefore:

- takes only `https` URLs with a DNS name or IP address, a non-root path and no userinfo,
  fragment, dot segment, space or non-ASCII character;
- resolves the host itself and refuses it if any of its addresses is not public (private,
  loopback, link-local, shared/CGNAT, multicast, reserved, unspecified, and those addresses inside
  IPv4-mapped, 6to4 and NAT64 ones); then connects to a checked address only, naming the host in
  the `Host` header and in TLS SNI, so the certificate is still verified against the host name and
  a DNS answer that changes between the check and the connection (rebinding) is never used;
- follows no redirect (the draft forbids it: the document lives at the URL that names it), uses
  no proxy and no pooled connection, asks for an uncompressed body, reads at most `max_bytes` of
  it, and bounds the whole exchange by `timeout`;
- accepts only a 200 JSON object whose `client_id` is the URL, character for character, and that
  describes a public client: no secret, `token_endpoint_auth_method` `none`, `redirect_uris` that
  are `https` or loopback `http` (RFC 8252), the authorization code grant, bounded fields;
- caches a document for as long as `Cache-Control` allows, clamped, and a refusal briefly, in
  bounded caches; shares one fetch among concurrent requests for a URL; caps concurrent fetches.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx2
import orjson
from cachetools import TLRUCache, TTLCache
from mcp.shared.auth import DEFAULT_GRANT_TYPES, OAuthClientInformationFull
from pydantic import AnyUrl, TypeAdapter, ValidationError

from app.observability import metrics

logger = logging.getLogger(__name__)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
# host, port -> the host's addresses, as strings; `system_resolver` unless a test injects its own.
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]

MAX_URL_LENGTH = 2000
MAX_ADDRESSES_TRIED = 4  # of a host's (all checked) addresses, how many to try connecting to
MAX_REDIRECT_URIS = 20
MAX_NAME_LENGTH = 200  # client_name, software_id, software_version, and each grant type
MAX_SCOPE_LENGTH = 1000
MAX_CONTACTS = 10
MAX_CONTACT_LENGTH = 320
MAX_GRANT_TYPES = 10

USER_AGENT = "engram-graph (client ID metadata document fetcher)"

# Grants that would let a client with no credential mint tokens without a user.
PUBLIC_CLIENT_FORBIDDEN_GRANTS = frozenset({"client_credentials", "password", "implicit"})

# Printable ASCII with no space: urlsplit silently drops tabs and newlines, and other parsers
# read backslashes, spaces and non-ASCII characters their own way.
_URL_CHARS = re.compile(r"[!-\[\]-~]+")
_LABEL = r"(?!-)[a-z0-9-]{1,63}(?<!-)"
# The last label is a top-level domain, never all digits, so "2130706433" or "127.1" (which
# resolvers read as IPv4 addresses) are not taken for names.
_HOSTNAME = re.compile(rf"(?:{_LABEL}\.)*(?:[a-z]{{2,63}}|xn--[a-z0-9-]{{1,59}})")
# How the SDK's authorization endpoint parses a request's redirect_uri; registered URIs are kept in
# that form so `OAuthClientInformationFull.validate_redirect_uri` matches them ("http://127.0.0.1:8080"
# is read as "http://127.0.0.1:8080/").
_REQUEST_URL: TypeAdapter[AnyUrl] = TypeAdapter(AnyUrl)
_DOT_SEGMENTS = frozenset({".", "..", "%2e", "%2e%2e", ".%2e", "%2e."})

_NAT64_WELL_KNOWN = ipaddress.IPv6Network("64:ff9b::/96")
# Not public, and not all counted so by `is_global`/`is_private` on every Python 3.11 patch release.
_NOT_PUBLIC = tuple(
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8",
        "100.64.0.0/10",  # shared address space (carrier-grade NAT)
        "192.0.0.0/24",
        "198.18.0.0/15",
        "64:ff9b:1::/48",  # local-use NAT64
        "2001::/23",  # IETF protocol assignments, Teredo among them
        "fc00::/7",
        "fec0::/10",
    )
)


class ClientDocumentError(Exception):
    """The `client_id` cannot be used; `reason` is short and safe to show the client
    (an `invalid_client` error description). `failure` is the bounded reason a fetch is counted
    under in `engram_auth_fetch_failures_total`: unreachable, timeout, http_status, forbidden
    (an address or scheme refused), busy, or invalid (the answer is not an acceptable document)."""

    def __init__(self, reason: str, failure: str = "invalid") -> None:
        super().__init__(reason)
        self.reason = reason
        self.failure = failure


class _Busy(ClientDocumentError):
    """Refused for this server's load, not for anything about the URL: never cached."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason, "busy")


async def system_resolver(host: str, port: int) -> list[str]:
    """The host's addresses from the system resolver, off the event loop."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def is_public(address: IPAddress) -> bool:
    """Whether `address` is on the public internet, looking inside addresses that embed IPv4 ones."""
    if isinstance(address, ipaddress.IPv6Address):
        # IPv4-mapped and NAT64 addresses reach the IPv4 address inside (and sit in ::/8, which
        # `is_reserved` counts whole): judge them by it.
        if address.ipv4_mapped is not None:
            return is_public(address.ipv4_mapped)
        if address in _NAT64_WELL_KNOWN:
            return is_public(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
        if address.sixtofour is not None and not is_public(address.sixtofour):
            return False
    return not (
        not address.is_global
        or address.is_private
        or address.is_loopback
        or address.is_link_local
        or address.is_multicast
        or address.is_reserved
        or address.is_unspecified
        or any(address in network for network in _NOT_PUBLIC)
    )


def _is_loopback(address: IPAddress) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def _ip(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class _Target:
    """Where a client_id URL points: what to connect to and what to say once connected."""

    scheme: str
    host: str  # a lower-case DNS name, or an IP address without brackets
    port: int
    authority: str  # the Host header
    target: str  # path and query
    address: IPAddress | None  # when the URL names an IP address rather than a host name


def _parse_client_id(client_id: str, *, allow_http: bool) -> _Target:
    if len(client_id) > MAX_URL_LENGTH:
        raise ClientDocumentError("client_id URL is too long")
    if not _URL_CHARS.fullmatch(client_id):
        raise ClientDocumentError("client_id URL has characters that are not allowed")
    parts = urlsplit(client_id)
    if parts.scheme != "https" and not (allow_http and parts.scheme == "http"):
        raise ClientDocumentError("client_id URL must be https")
    if "#" in client_id:
        raise ClientDocumentError("client_id URL must not have a fragment")
    if "@" in parts.netloc:
        raise ClientDocumentError("client_id URL must not have userinfo")
    if parts.path in ("", "/"):
        raise ClientDocumentError("client_id URL must have a path")
    if any(segment.lower() in _DOT_SEGMENTS for segment in parts.path.split("/")):
        raise ClientDocumentError("client_id URL must not have dot segments")
    try:
        port = parts.port
    except ValueError:
        raise ClientDocumentError("client_id URL has a bad port") from None
    host = parts.hostname or ""
    address = _ip(host)
    if address is None and (len(host) > 253 or not _HOSTNAME.fullmatch(host)):
        raise ClientDocumentError("client_id URL has a bad host")
    default_port = 443 if parts.scheme == "https" else 80
    named = f"[{host}]" if isinstance(address, ipaddress.IPv6Address) else host
    return _Target(
        scheme=parts.scheme,
        host=host,
        port=port or default_port,
        authority=named if port in (None, default_port) else f"{named}:{port}",
        target=parts.path + (f"?{parts.query}" if parts.query else ""),
        address=address,
    )


def freshness(headers: Mapping[str, str], *, default: float, minimum: float, maximum: float) -> float | None:
    """Seconds a document may be reused, from `Cache-Control` (max-age less `Age`), clamped to
    [minimum, maximum]; `None` for `no-store` or `no-cache` (this cache does not revalidate)."""
    directives: dict[str, str] = {}
    for part in headers.get("cache-control", "").split(","):
        name, _, value = part.partition("=")
        directives[name.strip().lower()] = value.strip().strip('"')
    if "no-store" in directives or "no-cache" in directives:
        return None
    seconds = default
    if "max-age" in directives:
        try:
            seconds = int(directives["max-age"]) - int(headers.get("age", "0") or "0")
        except ValueError:
            seconds = default
    return float(min(max(seconds, minimum), maximum))


def _optional_string(doc: Mapping[str, Any], key: str, limit: int) -> str | None:
    value = doc.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > limit:
        raise ClientDocumentError(f"{key} must be a string of at most {limit} characters")
    return value


def _string_list(doc: Mapping[str, Any], key: str, *, items: int, limit: int) -> list[str] | None:
    value = doc.get(key)
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or len(value) > items
        or not all(isinstance(v, str) and 0 < len(v) <= limit for v in value)
    ):
        raise ClientDocumentError(f"{key} must be a list of at most {items} strings")
    return value


def _absolute_url(value: str, *, loopback_http: bool) -> bool:
    """An absolute `https` URL with a host and no userinfo or fragment; `http` too for a loopback
    host when `loopback_http` (RFC 8252 section 7.3)."""
    if len(value) > MAX_URL_LENGTH or not _URL_CHARS.fullmatch(value) or "#" in value:
        return False
    parts = urlsplit(value)
    try:
        parts.port  # noqa: B018  (raises for a bad port)
    except ValueError:
        return False
    host = parts.hostname
    if not host or "@" in parts.netloc:
        return False
    if parts.scheme == "https":
        return True
    if parts.scheme == "http" and loopback_http:
        address = _ip(host)
        return host == "localhost" or (address is not None and _is_loopback(address))
    return False


def _redirect_uris(doc: dict[str, Any]) -> list[str]:
    """A document's redirect URIs, each an https URL or http on a loopback host, as the SDK keeps them."""
    redirect_uris = _string_list(doc, "redirect_uris", items=MAX_REDIRECT_URIS, limit=MAX_URL_LENGTH)
    if not redirect_uris:
        raise ClientDocumentError("redirect_uris is required")
    try:
        if not all(_absolute_url(uri, loopback_http=True) for uri in redirect_uris):
            raise ValueError
        return [str(_REQUEST_URL.validate_python(uri)) for uri in redirect_uris]
    except ValueError:  # pydantic's ValidationError included
        raise ClientDocumentError("each redirect URI must be an https URL, or http on a loopback host") from None


def client_information(doc: Any, client_id: str) -> OAuthClientInformationFull:
    """The registration a document describes, if it is one this server accepts for `client_id`.

    Only `none` is accepted as `token_endpoint_auth_method`: a public document cannot carry a
    secret, and `private_key_jwt` would mean fetching another client-chosen URL (`jwks_uri`) and
    checking client assertions, which this server does not do. Only the fields below are kept.
    """
    if not isinstance(doc, dict):
        raise ClientDocumentError("the document is not a JSON object")
    if doc.get("client_id") != client_id:
        raise ClientDocumentError("the document's client_id is not its URL")
    if doc.get("client_secret") is not None or doc.get("client_secret_expires_at") is not None:
        raise ClientDocumentError("a client ID metadata document cannot carry a secret")
    if doc.get("token_endpoint_auth_method", "none") != "none":
        raise ClientDocumentError("token_endpoint_auth_method must be none")

    redirect_uris = _redirect_uris(doc)
    grant_types = _string_list(doc, "grant_types", items=MAX_GRANT_TYPES, limit=MAX_NAME_LENGTH)
    grant_types = grant_types or list(DEFAULT_GRANT_TYPES)
    if "authorization_code" not in grant_types:
        raise ClientDocumentError("grant_types must include authorization_code")
    if forbidden := PUBLIC_CLIENT_FORBIDDEN_GRANTS.intersection(grant_types):
        raise ClientDocumentError(f"grant type {min(forbidden)} is not allowed for a public client")
    response_types = _string_list(doc, "response_types", items=4, limit=MAX_NAME_LENGTH) or ["code"]
    if any(t != "code" for t in response_types):
        raise ClientDocumentError("response_types must be code")

    fields: dict[str, Any] = {
        "client_id": client_id,
        "redirect_uris": redirect_uris,
        "token_endpoint_auth_method": "none",
        "grant_types": grant_types,
        "response_types": response_types,
        "client_name": _optional_string(doc, "client_name", MAX_NAME_LENGTH),
        "scope": _optional_string(doc, "scope", MAX_SCOPE_LENGTH),
        "software_id": _optional_string(doc, "software_id", MAX_NAME_LENGTH),
        "software_version": _optional_string(doc, "software_version", MAX_NAME_LENGTH),
        "contacts": _string_list(doc, "contacts", items=MAX_CONTACTS, limit=MAX_CONTACT_LENGTH),
    }
    for key in ("client_uri", "logo_uri", "tos_uri", "policy_uri"):
        value = _optional_string(doc, key, MAX_URL_LENGTH)
        if value is not None and not _absolute_url(value, loopback_http=False):
            raise ClientDocumentError(f"{key} must be an https URL")
        fields[key] = value
    application_type = _optional_string(doc, "application_type", MAX_NAME_LENGTH)
    if application_type not in (None, "web", "native"):
        raise ClientDocumentError("application_type must be web or native")
    fields["application_type"] = application_type
    try:
        return OAuthClientInformationFull.model_validate({k: v for k, v in fields.items() if v is not None})
    except ValidationError as exc:
        where = ".".join(str(part) for part in exc.errors()[0]["loc"])
        raise ClientDocumentError(f"the document has an invalid {where}") from None


@dataclass(frozen=True, slots=True)
class _Cached:
    info: OAuthClientInformationFull
    ttl: float


class ClientDocuments:
    """Fetches, checks and caches client ID metadata documents.

    `allow_insecure_loopback` is for tests and local development only: it lets `client_id` URLs
    use plain `http` when the host is loopback, and loopback addresses (never other non-public
    ones). `verify` is the TLS context that checks the document servers' certificates (the system's
    trust store by default). `max_bytes` defaults to the 5 KiB the draft recommends; real
    documents are well under 1 KiB. `timeout` bounds a whole fetch, from resolution to the last
    byte; waiting for one of the `max_concurrent` fetch slots is bounded by it too, and at most
    `max_pending` different URLs are fetched or waiting at once.
    """

    def __init__(
        self,
        *,
        verify: ssl.SSLContext | None = None,
        resolver: Resolver = system_resolver,
        allow_insecure_loopback: bool = False,
        max_bytes: int = 5 * 1024,
        timeout: float = 5.0,
        max_entries: int = 1000,
        default_ttl: float = 300.0,
        min_ttl: float = 60.0,
        max_ttl: float = 24 * 3600.0,
        refusal_ttl: float = 30.0,
        max_refusals: int = 1000,
        max_concurrent: int = 8,
        max_pending: int = 64,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._resolver = resolver
        self._allow_loopback = allow_insecure_loopback
        self._max_bytes = max_bytes
        self._timeout = timeout
        self._default_ttl = default_ttl
        self._min_ttl = min_ttl
        self._max_ttl = max_ttl
        self._max_pending = max_pending
        self._documents: TLRUCache[str, _Cached] = TLRUCache(
            maxsize=max_entries, ttu=lambda _key, entry, now: now + entry.ttl, timer=clock
        )
        self._refusals: TTLCache[str, str] = TTLCache(maxsize=max_refusals, ttl=refusal_ttl, timer=clock)
        self._in_flight: dict[str, asyncio.Task[OAuthClientInformationFull]] = {}
        self._slots = asyncio.Semaphore(max_concurrent)
        # No proxy (it would resolve the name itself), no redirects, no kept-alive connection (a
        # pooled one is keyed by address, so it could serve another host name on that address).
        # The environment still names the trust store (SSL_CERT_FILE), but not a proxy.
        self._http = httpx2.AsyncClient(
            verify=verify if verify is not None else httpx2.create_ssl_context(),
            trust_env=False,
            follow_redirects=False,
            timeout=httpx2.Timeout(timeout),
            limits=httpx2.Limits(max_connections=max_concurrent, max_keepalive_connections=0),
        )

    async def __aenter__(self) -> ClientDocuments:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        for task in list(self._in_flight.values()):
            task.cancel()
        await self._http.aclose()

    async def fetch(self, client_id: str) -> OAuthClientInformationFull:
        """The registration `client_id`'s document describes; `ClientDocumentError` if refused."""
        target = _parse_client_id(client_id, allow_http=self._allow_loopback)
        if (cached := self._documents.get(client_id)) is not None:
            return cached.info.model_copy(deep=True)
        if (reason := self._refusals.get(client_id)) is not None:
            raise ClientDocumentError(reason)
        task = self._in_flight.get(client_id)
        if task is None:
            if len(self._in_flight) >= self._max_pending:
                metrics.AUTH_FETCH_FAILURES.labels("client_metadata", "busy").inc()
                raise _Busy("too many client documents are being fetched; try again")
            task = asyncio.create_task(self._load(client_id, target))
            self._in_flight[client_id] = task
            task.add_done_callback(lambda done: self._settle(client_id, done))
        info = await asyncio.shield(task)
        return info.model_copy(deep=True)

    def _settle(self, client_id: str, task: asyncio.Task[OAuthClientInformationFull]) -> None:
        if self._in_flight.get(client_id) is task:
            del self._in_flight[client_id]
        if not task.cancelled():
            task.exception()  # retrieved, so a fetch whose callers all left is not reported as lost

    async def _load(self, client_id: str, target: _Target) -> OAuthClientInformationFull:
        try:
            async with asyncio.timeout(self._timeout):
                await self._slots.acquire()
        except TimeoutError:
            metrics.AUTH_FETCH_FAILURES.labels("client_metadata", "busy").inc()
            raise _Busy("too many client documents are being fetched; try again") from None
        try:
            async with asyncio.timeout(self._timeout):
                info, ttl = await self._retrieve(client_id, target)
        except (TimeoutError, ClientDocumentError) as exc:
            reason = exc.reason if isinstance(exc, ClientDocumentError) else "fetching the document timed out"
            failure = exc.failure if isinstance(exc, ClientDocumentError) else "timeout"
            metrics.AUTH_FETCH_FAILURES.labels("client_metadata", failure).inc()
            logger.info("client ID metadata document %r refused: %s", client_id, reason)
            self._refusals[client_id] = reason
            raise ClientDocumentError(reason) from None
        finally:
            self._slots.release()
        if ttl is not None:
            self._documents[client_id] = _Cached(info, ttl)
        return info

    async def _retrieve(self, client_id: str, target: _Target) -> tuple[OAuthClientInformationFull, float | None]:
        addresses = [target.address] if target.address is not None else await self._resolve(target)
        for address in addresses:
            loopback = self._allow_loopback and _is_loopback(address)
            if not (loopback or is_public(address)):
                raise ClientDocumentError("client_id host is not a public address", "forbidden")
            if target.scheme == "http" and not loopback:
                raise ClientDocumentError("client_id URL must be https", "forbidden")
        for address in addresses[:MAX_ADDRESSES_TRIED]:
            try:
                headers, body = await self._get(target, address)
            except (httpx2.ConnectError, httpx2.ConnectTimeout) as exc:
                logger.debug("could not connect to %s for %r: %s", address, client_id, exc)
                continue
            try:
                doc = orjson.loads(body)
            except orjson.JSONDecodeError:
                raise ClientDocumentError("the document is not JSON") from None
            info = client_information(doc, client_id)
            return info, freshness(headers, default=self._default_ttl, minimum=self._min_ttl, maximum=self._max_ttl)
        raise ClientDocumentError("could not connect securely to the client_id host", "unreachable")

    async def _resolve(self, target: _Target) -> list[IPAddress]:
        try:
            answers = await self._resolver(target.host, target.port)
        except OSError:
            raise ClientDocumentError("client_id host does not resolve", "unreachable") from None
        addresses = [_ip(answer) for answer in answers]
        if not addresses or None in addresses:
            raise ClientDocumentError("client_id host does not resolve", "unreachable")
        return list(dict.fromkeys(a for a in addresses if a is not None))

    async def _get(self, target: _Target, address: IPAddress) -> tuple[httpx2.Headers, bytes]:
        """GET the document from `address`, as if from the URL's host: pinned, bounded."""
        literal = f"[{address}]" if isinstance(address, ipaddress.IPv6Address) else str(address)
        url = f"{target.scheme}://{literal}:{target.port}{target.target}"
        headers = {
            "Host": target.authority,
            "Accept": "application/json",
            "Accept-Encoding": "identity",
            "User-Agent": USER_AGENT,
        }
        extensions = {"sni_hostname": target.host} if target.address is None else {}
        try:
            async with self._http.stream("GET", url, headers=headers, extensions=extensions) as response:
                if 300 <= response.status_code < 400:
                    raise ClientDocumentError("the client_id URL redirects; redirects are not followed", "http_status")
                if response.status_code != 200:
                    raise ClientDocumentError(f"the client_id URL answered HTTP {response.status_code}", "http_status")
                media_type = response.headers.get("content-type", "").partition(";")[0].strip().lower()
                if not (media_type == "application/json" or re.fullmatch(r"application/[!-~]+\+json", media_type)):
                    raise ClientDocumentError("the document is not served as application/json")
                if response.headers.get("content-encoding", "identity").strip().lower() not in ("", "identity"):
                    raise ClientDocumentError("the document must not be compressed")
                declared = response.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > self._max_bytes:
                    raise ClientDocumentError("the document is too large")
                body = bytearray()
                async for chunk in response.aiter_raw():
                    body += chunk
                    if len(body) > self._max_bytes:
                        raise ClientDocumentError("the document is too large")
                return response.headers, bytes(body)
        except (httpx2.ConnectError, httpx2.ConnectTimeout):
            raise
        except httpx2.TimeoutException:
            raise ClientDocumentError("fetching the document timed out", "timeout") from None
        except httpx2.HTTPError:
            raise ClientDocumentError("the document could not be read", "unreachable") from None
