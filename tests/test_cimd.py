"""Client ID metadata documents fetched from real HTTPS and HTTP servers on loopback.

The HTTPS server's certificate comes from a test CA that only the fetcher under test trusts, and
covers `localhost`, 127.0.0.1 and `docs.test`. `docs.test` does not resolve on this machine: the
fetcher is given a stub resolver, so a fetch from it that works shows the connection went to the
checked address, with the name still sent as SNI and Host and still verified in the certificate.
"""

from __future__ import annotations

import asyncio
import ssl
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
import pytest
import trustme
from mcp.shared.auth import OAuthClientMetadata
from pydantic import AnyUrl

from app.auth.cimd import ClientDocumentError, ClientDocuments, client_information, freshness, is_public

Write = Callable[[asyncio.StreamWriter], Awaitable[None]]


class DocumentServer:
    """A small HTTP/1.1 server: each path answers with a handler that writes the raw response,
    so tests can send what a well-behaved server would not (lying lengths, endless or slow bodies)."""

    def __init__(self, tls: ssl.SSLContext | None) -> None:
        self.tls = tls
        self.routes: dict[str, Write] = {}
        self.hits: Counter[str] = Counter()
        self.hosts: list[str] = []  # Host headers received
        self.names: list[str | None] = []  # TLS SNI received
        self._tasks: set[asyncio.Task[Any]] = set()
        if tls is not None:
            tls.sni_callback = self._sni

    def _sni(self, _obj: ssl.SSLObject, name: str | None, _ctx: ssl.SSLContext) -> None:
        self.names.append(name)

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        self.port = self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        self.server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            path = head[0].split(" ")[1]
            headers = dict(line.split(": ", 1) for line in head[1:] if line)
            self.hosts.append(headers.get("Host", headers.get("host", "")))
            self.hits[path] += 1
            handler = self.routes.get(path, respond(b"not found", status=404, content_type="text/plain"))
            await handler(writer)
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            writer.close()
            self._tasks.discard(task)

    def route(self, handler: Write) -> str:
        """A fresh path answered by `handler`, so tests sharing the server never share a URL."""
        path = f"/{uuid.uuid4().hex}/client.json"
        self.routes[path] = handler
        return path


def respond(
    body: bytes | dict[str, Any],
    *,
    status: int = 200,
    content_type: str = "application/json",
    headers: dict[str, str] | None = None,
    delay: float = 0.0,
) -> Write:
    data = orjson.dumps(body) if isinstance(body, dict) else body
    fields = {"Content-Type": content_type, "Content-Length": str(len(data)), "Connection": "close"}
    fields.update(headers or {})

    async def write(writer: asyncio.StreamWriter) -> None:
        if delay:
            await asyncio.sleep(delay)
        head = "".join(f"{k}: {v}\r\n" for k, v in fields.items())
        writer.write(f"HTTP/1.1 {status} X\r\n{head}\r\n".encode() + data)
        await writer.drain()

    return write


def raw(head: bytes, chunks: list[bytes] | None = None, *, every: float = 0.0, repeat: int = 1) -> Write:
    """Writes `head`, then `chunks` `repeat` times, pausing `every` seconds between chunks."""

    async def write(writer: asyncio.StreamWriter) -> None:
        writer.write(head)
        await writer.drain()
        for _ in range(repeat):
            for chunk in chunks or []:
                if every:
                    await asyncio.sleep(every)
                writer.write(chunk)
                await writer.drain()

    return write


class Resolver:
    """A stub DNS: names to addresses, recording every question."""

    def __init__(self, answers: dict[str, list[str]]) -> None:
        self.answers = answers
        self.asked: list[str] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.asked.append(host)
        if host not in self.answers:
            raise OSError("no such host")
        return self.answers[host]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
async def https(ca: trustme.CA) -> AsyncIterator[DocumentServer]:
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("localhost", "127.0.0.1", "docs.test").configure_cert(tls)
    server = DocumentServer(tls)
    await server.start()
    yield server
    await server.stop()


@pytest.fixture(scope="module")
async def http() -> AsyncIterator[DocumentServer]:
    server = DocumentServer(None)
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
def trust(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ca.configure_trust(context)
    return context


@pytest.fixture
def dns() -> Resolver:
    return Resolver(
        {
            "docs.test": ["127.0.0.1"],
            "localhost": ["127.0.0.1", "::1"],
            "other.test": ["127.0.0.1"],  # not in the certificate
            "intranet.test": ["10.1.2.3"],
            "mixed.test": ["93.184.215.14", "10.1.2.3"],
            "public.test": ["93.184.215.14"],
        }
    )


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def documents(trust: ssl.SSLContext, dns: Resolver, clock: Clock) -> AsyncIterator[ClientDocuments]:
    async with ClientDocuments(verify=trust, resolver=dns, allow_insecure_loopback=True, clock=clock) as docs:
        yield docs


@pytest.fixture
async def strict(trust: ssl.SSLContext, dns: Resolver) -> AsyncIterator[ClientDocuments]:
    """The production setting: https to public addresses only."""
    async with ClientDocuments(verify=trust, resolver=dns) as docs:
        yield docs


def document(client_id: str, **fields: Any) -> dict[str, Any]:
    """What an SDK client publishes: its registration metadata, plus the URL as client_id."""
    metadata = OAuthClientMetadata(
        redirect_uris=[AnyUrl("http://localhost:3030/callback"), AnyUrl("https://app.example/oauth/cb")],
        client_name="Example Assistant",
        client_uri=AnyUrl("https://app.example"),
        logo_uri=AnyUrl("https://app.example/logo.png"),
        token_endpoint_auth_method="none",
        scope="memory:read memory:write",
    )
    doc = metadata.model_dump(mode="json", exclude_none=True) | {"client_id": client_id}
    doc.update(fields)
    return {k: v for k, v in doc.items() if v is not ...}


def serve(server: DocumentServer, make: Callable[[str], Write], host: str = "docs.test") -> str:
    """Routes a fresh path to `make(url)` and returns the document's URL on `host`."""
    path = f"/{uuid.uuid4().hex}/client.json"
    scheme = "https" if server.tls else "http"
    url = f"{scheme}://{host}:{server.port}{path}"
    server.routes[path] = make(url)
    return url


def path_of(url: str) -> str:
    return "/" + url.split("/", 3)[3]


async def refused(documents: ClientDocuments, url: str) -> str:
    with pytest.raises(ClientDocumentError) as caught:
        await documents.fetch(url)
    return caught.value.reason


async def test_good_document_is_accepted_from_the_checked_address_and_cached(https, documents, dns):
    url = serve(https, lambda u: respond(document(u)))
    info = await documents.fetch(url)
    assert info.client_id == url
    assert info.token_endpoint_auth_method == "none"
    assert info.client_name == "Example Assistant"
    assert info.grant_types == ["authorization_code", "refresh_token"]
    assert info.validate_redirect_uri(AnyUrl("https://app.example/oauth/cb")) == AnyUrl("https://app.example/oauth/cb")
    assert str(info.logo_uri) == "https://app.example/logo.png"
    # docs.test exists only in the stub: the connection went to the address checked, and the name
    # still went out as SNI and Host, and matched the certificate.
    assert dns.asked == ["docs.test"]
    assert https.names[-1] == "docs.test"
    assert https.hosts[-1] == f"docs.test:{https.port}"

    again = await documents.fetch(url)
    assert again == info
    assert https.hits[path_of(url)] == 1
    again.client_name = "changed by a caller"
    assert (await documents.fetch(url)).client_name == "Example Assistant"


async def test_system_resolver_and_ip_literal_with_loopback_allowed(https, trust):
    async with ClientDocuments(verify=trust, allow_insecure_loopback=True) as docs:
        for host in ("localhost", "127.0.0.1"):
            url = serve(https, lambda u: respond(document(u)), host=host)
            assert (await docs.fetch(url)).client_id == url


async def test_certificate_must_name_the_host_even_when_pinned(https, documents):
    url = serve(https, lambda u: respond(document(u)), host="other.test")
    assert "securely" in await refused(documents, url)


async def test_untrusted_certificate_is_refused(https, dns):
    async with ClientDocuments(resolver=dns, allow_insecure_loopback=True) as docs:  # system trust only
        url = serve(https, lambda u: respond(document(u)))
        assert "securely" in await refused(docs, url)


@pytest.mark.parametrize(
    ("cache_control", "lifetime"),
    [
        ("public, max-age=120", 120),
        ("max-age=1", 60),  # raised to the minimum
        (None, 300),  # the default without caching headers
        (f"max-age={10**9}", 24 * 3600),  # lowered to the maximum
    ],
)
async def test_max_age_is_respected_and_clamped(https, documents, clock, cache_control, lifetime):
    headers = {"Cache-Control": cache_control} if cache_control else {}
    url = serve(https, lambda u: respond(document(u), headers=headers))
    start = clock.now
    await documents.fetch(url)
    clock.now = start + lifetime - 1
    await documents.fetch(url)
    assert https.hits[path_of(url)] == 1
    clock.now = start + lifetime + 1
    await documents.fetch(url)
    assert https.hits[path_of(url)] == 2


async def test_no_store_is_not_cached(https, documents):
    for directive in ("no-store", "no-cache"):
        url = serve(https, lambda u, d=directive: respond(document(u), headers={"Cache-Control": d}))
        await documents.fetch(url)
        await documents.fetch(url)
        assert https.hits[path_of(url)] == 2


def test_freshness_reads_cache_control():
    bounds = {"default": 300.0, "minimum": 60.0, "maximum": 86400.0}
    assert freshness({}, **bounds) == 300
    assert freshness({"cache-control": "max-age=600"}, **bounds) == 600
    assert freshness({"cache-control": "max-age=600", "age": "500"}, **bounds) == 100
    assert freshness({"cache-control": 'max-age="900", must-revalidate'}, **bounds) == 900
    assert freshness({"cache-control": "max-age=soon"}, **bounds) == 300
    assert freshness({"cache-control": "Max-Age=0"}, **bounds) == 60
    assert freshness({"cache-control": "private, No-Store"}, **bounds) is None


async def test_refusals_are_cached_briefly(https, documents, clock):
    path = https.route(respond(b"gone", status=404, content_type="text/plain"))
    url = f"https://docs.test:{https.port}{path}"
    assert "404" in await refused(documents, url)
    assert "404" in await refused(documents, url)
    assert https.hits[path] == 1
    https.routes[path] = respond(document(url))
    clock.now += 31
    assert (await documents.fetch(url)).client_id == url
    assert https.hits[path] == 2


@pytest.mark.parametrize(
    "url",
    [
        "https://127.0.0.1:{port}/client.json",
        "https://localhost:{port}/client.json",
        "https://intranet.test/client.json",
        "https://mixed.test/client.json",  # one private address among public ones is enough
        "https://10.0.0.1/client.json",
        "https://172.16.5.4/client.json",
        "https://192.168.1.1/client.json",
        "https://169.254.169.254/latest/meta-data",
        "https://100.64.0.1/client.json",
        "https://0.0.0.0/client.json",
        "https://224.0.0.1/client.json",
        "https://240.0.0.1/client.json",
        "https://198.18.0.1/client.json",
        "https://[::1]/client.json",
        "https://[::]/client.json",
        "https://[::ffff:127.0.0.1]/client.json",
        "https://[::ffff:10.0.0.1]/client.json",
        "https://[fe80::1]/client.json",
        "https://[fc00::1]/client.json",
        "https://[ff02::1]/client.json",
        "https://[64:ff9b::a00:1]/client.json",  # NAT64 of 10.0.0.1
        "https://[2002:a00:1::]/client.json",  # 6to4 of 10.0.0.1
        "https://[2001:db8::1]/client.json",
    ],
)
async def test_non_public_addresses_are_refused(https, strict, url):
    url = url.format(port=https.port)
    before = sum(https.hits.values())
    assert "public address" in await refused(strict, url)
    assert sum(https.hits.values()) == before


async def test_loopback_allowance_does_not_extend_to_other_private_addresses(documents):
    assert "public address" in await refused(documents, "https://intranet.test/client.json")
    assert "public address" in await refused(documents, "https://[::ffff:192.168.0.1]/client.json")


def test_public_addresses_are_public():
    from ipaddress import ip_address

    for address in ("93.184.215.14", "8.8.8.8", "2606:4700::1111", "64:ff9b::808:808", "::ffff:8.8.8.8"):
        assert is_public(ip_address(address)), address


async def test_plain_http_only_with_loopback_allowed(http, documents, strict):
    url = serve(http, lambda u: respond(document(u)), host="127.0.0.1")
    assert (await documents.fetch(url)).client_id == url
    assert "https" in await refused(strict, url)
    # Even with loopback allowed, http is for loopback addresses only.
    assert "https" in await refused(documents, "http://public.test/client.json")


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://app.example/client.json", "https"),
        ("ftp://app.example/client.json", "https"),
        ("https://app.example", "path"),
        ("https://app.example/", "path"),
        ("https://app.example/?x=1", "path"),
        ("https://user:pass@app.example/client.json", "userinfo"),
        ("https://app.example@127.0.0.1/client.json", "userinfo"),
        ("https://app.example/client.json#x", "fragment"),
        ("https://app.example/client.json#", "fragment"),
        ("https://app.example/a/../client.json", "dot segments"),
        ("https://app.example/a/./client.json", "dot segments"),
        ("https://app.example/a/%2E%2E/client.json", "dot segments"),
        ("https://app.example/client json", "characters"),
        ("https://app.example/client\tjson", "characters"),
        ("https://app.example\\@127.0.0.1/client.json", "characters"),
        ("https://app.éxample/client.json", "characters"),
        ("https://app.example:99999/client.json", "port"),
        ("https://2130706433/client.json", "host"),
        ("https://127.1/client.json", "host"),
        ("https://0x7f.0.0.1/client.json", "host"),
        ("https:///client.json", "host"),
        ("https://app_example.com/client.json", "host"),
        ("https://app.example/" + "a" * 2000, "too long"),
    ],
)
async def test_malformed_client_ids_are_refused_without_a_request(strict, dns, url, reason):
    assert reason in await refused(strict, url)
    assert dns.asked == []


async def test_unresolvable_host_is_refused(documents):
    assert "resolve" in await refused(documents, "https://nowhere.test/client.json")


async def test_declared_oversized_document_is_refused(https, documents):
    url = serve(https, lambda u: respond(document(u, client_name="x" * 6000)))
    assert "too large" in await refused(documents, url)


async def test_streamed_oversized_document_is_refused(https, documents):
    chunk = b"5000\r\n" + b" " * 0x5000 + b"\r\n"
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    url = serve(https, lambda u: raw(head + b"3\r\n{ }\r\n", [chunk], repeat=100))
    assert "too large" in await refused(documents, url)


async def test_body_beyond_a_lying_content_length_is_not_read(https, documents):
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 20\r\n\r\n"
    url = serve(https, lambda u: raw(head, [orjson.dumps(document(u)), b" " * 100_000]))
    assert "not JSON" in await refused(documents, url)


async def test_close_delimited_oversized_document_is_refused(http, documents):
    head = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n"
    url = serve(http, lambda u: raw(head, [b" " * 4096], repeat=100), host="127.0.0.1")
    assert "too large" in await refused(documents, url)


async def test_slow_servers_are_cut_off(https, trust, dns):
    silent = serve(https, lambda u: respond(document(u), delay=30))
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n"
    trickle = serve(https, lambda u: raw(head, [b" "] * 5000, every=0.02))  # each read is quick
    async with ClientDocuments(verify=trust, resolver=dns, allow_insecure_loopback=True, timeout=0.3) as docs:
        for url in (silent, trickle):
            assert "timed out" in await refused(docs, url)


async def test_mismatching_client_id_is_refused(https, documents):
    for claimed in ("https://app.example/client.json", "{url}/", "{url}?", "{url_upper}"):
        url = serve(https, lambda u, c=claimed: respond(document(c.format(url=u, url_upper=u.replace("docs", "DOCS")))))
        assert "client_id is not its URL" in await refused(documents, url)


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"redirect_uris": ...}, "redirect_uris is required"),
        ({"redirect_uris": []}, "redirect_uris is required"),
        ({"redirect_uris": "https://app.example/cb"}, "list"),
        ({"redirect_uris": [7]}, "list"),
        ({"redirect_uris": ["https://app.example/cb"] * 21}, "list"),
        ({"redirect_uris": ["/cb"]}, "redirect URI"),
        ({"redirect_uris": ["http://app.example/cb"]}, "redirect URI"),
        ({"redirect_uris": ["http://10.0.0.1/cb"]}, "redirect URI"),
        ({"redirect_uris": ["javascript:alert(1)"]}, "redirect URI"),
        ({"redirect_uris": ["data:text/html,hi"]}, "redirect URI"),
        ({"redirect_uris": ["com.example.app:/cb"]}, "redirect URI"),
        ({"redirect_uris": ["https://app.example/cb#frag"]}, "redirect URI"),
        ({"redirect_uris": ["https://user@app.example/cb"]}, "redirect URI"),
        ({"redirect_uris": ["https:///cb"]}, "redirect URI"),
        ({"redirect_uris": ["https://app.example/" + "a" * 2000]}, "list"),
        ({"token_endpoint_auth_method": "client_secret_basic"}, "must be none"),
        ({"token_endpoint_auth_method": "private_key_jwt", "jwks_uri": "https://app.example/jwks"}, "must be none"),
        ({"client_secret": "s3cret"}, "secret"),
        ({"grant_types": ["client_credentials", "authorization_code"]}, "client_credentials"),
        ({"grant_types": ["refresh_token"]}, "authorization_code"),
        ({"response_types": ["token"]}, "response_types"),
        ({"client_name": "x" * 201}, "client_name"),
        ({"client_name": {"en": "x"}}, "client_name"),
        ({"scope": "x" * 1001}, "scope"),
        ({"contacts": ["a@example.com"] * 11}, "contacts"),
        ({"logo_uri": "javascript:alert(1)"}, "logo_uri"),
        ({"client_uri": "http://app.example"}, "client_uri"),
        ({"application_type": "service"}, "application_type"),
    ],
)
async def test_bad_documents_are_refused(https, documents, fields, reason):
    url = serve(https, lambda u: respond(document(u, **fields)))
    assert reason in await refused(documents, url)


def editor_document(url: str) -> dict[str, Any]:
    """An editor's document: loopback callbacks with no path, an extra grant, an unknown member."""
    return {
        "client_id": url,
        "client_name": "Editor",
        "redirect_uris": ["http://127.0.0.1:33418", "http://[::1]:33418/", "https://editor.example/redirect"],
        "grant_types": ["authorization_code", "refresh_token", "urn:ietf:params:oauth:grant-type:device_code"],
        "response_types": ["code"],
        "application_type": "native",
        "dpop_bound_access_tokens": True,
        "client_secret": None,
    }


def web_connector_document(url: str) -> dict[str, Any]:
    """The shape a hosted assistant's connector publishes: one https callback, no application_type."""
    return {
        "client_id": url,
        "client_name": "Assistant",
        "client_uri": "https://assistant.example",
        "redirect_uris": ["https://assistant.example/api/mcp/auth_callback"],
        "grant_types": ["authorization_code", "refresh_token", "urn:ietf:params:oauth:grant-type:jwt-bearer"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    }


@pytest.mark.parametrize(
    ("make", "content_type", "callback"),
    [
        (editor_document, "application/vnd.example.client+json; charset=utf-8", "http://127.0.0.1:33418"),
        (web_connector_document, "application/json", "https://assistant.example/api/mcp/auth_callback"),
    ],
)
async def test_documents_real_clients_publish_are_accepted(https, documents, make, content_type, callback):
    url = serve(https, lambda u: respond(make(u), content_type=content_type))
    info = await documents.fetch(url)
    assert info.client_id == url
    assert info.token_endpoint_auth_method == "none"
    # Kept as the SDK's authorization endpoint parses a request's redirect_uri, so they match
    # ("http://127.0.0.1:33418" is read as "http://127.0.0.1:33418/").
    assert info.validate_redirect_uri(AnyUrl(callback)) == AnyUrl(callback)
    assert info.grant_types == make(url)["grant_types"]


def test_fields_outside_the_public_client_profile_are_dropped():
    url = "https://app.example/client.json"
    doc = document(url, jwks={"keys": []}, client_id_issued_at=1, issuer="https://elsewhere.example")
    info = client_information(doc, url)
    assert info.jwks is None and info.client_id_issued_at is None and info.issuer is None


@pytest.mark.parametrize(
    ("body", "content_type", "reason"),
    [
        (b"<html>hello</html>", "text/html", "application/json"),
        (b'{"client_id": "x"}', "text/plain", "application/json"),
        (b"<html>hello</html>", "application/json", "not JSON"),
        (b'{"client_id": ', "application/json", "not JSON"),
        (b'["a list"]', "application/json", "not a JSON object"),
        (b"", "application/json", "not JSON"),
    ],
)
async def test_non_json_is_refused(https, documents, body, content_type, reason):
    url = serve(https, lambda u: respond(body, content_type=content_type))
    assert reason in await refused(documents, url)


async def test_compressed_document_is_refused(https, documents):
    url = serve(https, lambda u: respond(document(u), headers={"Content-Encoding": "gzip"}))
    assert "compressed" in await refused(documents, url)


async def test_redirects_are_not_followed(https, documents):
    target = serve(https, lambda u: respond(document(u)))
    for status in (301, 302, 307, 308):
        url = serve(https, lambda u, s=status: respond(b"", status=s, headers={"Location": target}))
        assert "redirect" in await refused(documents, url)
    assert https.hits[path_of(target)] == 0


async def test_concurrent_fetches_of_one_url_make_one_request(https, documents):
    url = serve(https, lambda u: respond(document(u), delay=0.2))
    results = await asyncio.gather(*(documents.fetch(url) for _ in range(20)))
    assert {r.client_id for r in results} == {url}
    assert https.hits[path_of(url)] == 1


async def test_a_cancelled_caller_does_not_cancel_the_shared_fetch(https, documents):
    url = serve(https, lambda u: respond(document(u), delay=0.2))
    first = asyncio.create_task(documents.fetch(url))
    second = asyncio.create_task(documents.fetch(url))
    await asyncio.sleep(0.05)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert (await second).client_id == url
    assert https.hits[path_of(url)] == 1


async def test_concurrent_fetches_are_capped(https, trust, dns):
    active = peak = 0

    def counted(url: str) -> Write:
        answer = respond(document(url), delay=0.05)

        async def write(writer: asyncio.StreamWriter) -> None:
            nonlocal active, peak
            active += 1
            peak = max(peak, active)
            try:
                await answer(writer)
            finally:
                active -= 1

        return write

    urls = [serve(https, counted) for _ in range(5)]
    async with ClientDocuments(
        verify=trust, resolver=dns, allow_insecure_loopback=True, max_concurrent=2, timeout=2
    ) as docs:
        results = await asyncio.gather(*(docs.fetch(u) for u in urls))
    assert [r.client_id for r in results] == urls
    assert peak == 2


async def test_too_many_pending_urls_are_refused_but_not_remembered(https, trust, dns):
    slow = serve(https, lambda u: respond(document(u), delay=0.2))
    other = serve(https, lambda u: respond(document(u)))
    async with ClientDocuments(verify=trust, resolver=dns, allow_insecure_loopback=True, max_pending=1) as docs:
        pending = asyncio.create_task(docs.fetch(slow))
        await asyncio.sleep(0.02)
        assert "too many" in await refused(docs, other)
        await pending
        assert (await docs.fetch(other)).client_id == other
