"""The built-in authorization server, end to end: the SDK's OAuthClientProvider connects by URL
alone (dynamic registration), a person signs in and consents with real form posts, and every
refusal answers the right OAuth error and issues nothing."""

from __future__ import annotations

import asyncio
import hashlib
import html
import re
import secrets
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urljoin, urlsplit

import asyncpg
import httpx2
import orjson
import pytest
import trustme
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.config import Settings
from tests.support.auth import (
    PASSWORD,
    REDIRECT,
    Flow,
    add_user,
    jwt_part,
    mcp_status,
    post_mcp,
    register,
    until_refused,
)
from tests.support.browser import CHROMIUM, CHROMIUM_ARGS
from tests.support.client import connect, ok
from tests.support.local_http import ThreadedServer
from tests.support.oauth_agent import Person, hidden_fields, oauth_client
from tests.support.oidc_issuer import CLIENT_ID as UPSTREAM_CLIENT
from tests.support.oidc_issuer import StandInIssuer
from tests.support.server import ROOT, Server, engram, free_port, serve, serve_builtin


@pytest.fixture(scope="module")
def builtin(db_settings: Settings) -> Iterator[Server]:
    with serve_builtin(
        db_settings,
        ENGRAM_SIGN_IN_MAX_FAILURES="3",
        ENGRAM_SIGNING_KEY_RELOAD_SECONDS="1",
    ) as running:
        yield running


async def test_metadata_describes_what_the_server_accepts(builtin):
    metadata = httpx2.get(f"{builtin.base}/.well-known/oauth-authorization-server").json()
    assert metadata["issuer"] == builtin.base  # exactly: clients compare it byte for byte
    assert metadata["authorization_endpoint"] == f"{builtin.base}/authorize"
    assert metadata["code_challenge_methods_supported"] == ["S256"]
    assert "none" in metadata["token_endpoint_auth_methods_supported"]
    assert metadata["authorization_response_iss_parameter_supported"] is True
    assert metadata["registration_endpoint"] == f"{builtin.base}/register"
    resource = httpx2.get(f"{builtin.base}/.well-known/oauth-protected-resource/mcp").json()
    assert resource["authorization_servers"] == [builtin.base]
    keys = httpx2.get(metadata["jwks_uri"]).json()["keys"]
    assert keys and all("d" not in k for k in keys)  # public halves only


async def test_sdk_client_connects_by_url_alone(builtin, tenant):
    person = add_user(builtin, tenant)
    http, storage = oauth_client(builtin.url, person)
    async with Client(streamable_http_client(builtin.url, http_client=http), mode="legacy") as c:
        ok(await c.call_tool("upsert_entities", {"entities": [{"name": "Signed in by URL", "type": "t"}]}))
        history = ok(await c.call_tool("entity_history", {"name": "Signed in by URL"}))
    assert person.redirect["iss"] == builtin.base  # RFC 9207
    assert storage.client_info is not None and storage.client_info.client_id  # registered dynamically
    assert storage.tokens is not None and storage.tokens.refresh_token
    token = jwt_part(storage.tokens.access_token, 1)
    assert token["tenant_id"] == tenant and token["aud"] == builtin.url and token["sub"]
    assert set(token["scope"].split()) == {"memory:read", "memory:write"}  # a writer gets no admin
    assert history["entries"][0]["actor"] == token["sub"]
    consent = person.pages[-1]
    assert "Test Assistant" in consent and tenant in consent and "127.0.0.1:33418" in consent

    # The same tenant's memory through a token of the next process generation: a refresh.
    async with Client(streamable_http_client(builtin.url, http_client=http), mode="auto") as c:
        assert ok(await c.call_tool("get_entity", {"name": "Signed in by URL"}))["name"] == "Signed in by URL"


@pytest.fixture
async def flow(builtin, tenant) -> Flow:
    registered = await register(builtin)
    assert registered.status_code == 201, registered.text
    return Flow(builtin, add_user(builtin, tenant), registered.json()["client_id"], tenant)


async def test_code_is_single_use_and_reuse_revokes_the_grant(flow):
    code = await flow.code()
    first = await flow.exchange(code)
    assert first.status_code == 200, first.text
    access = first.json()["access_token"]
    assert await mcp_status(flow.server, access) == 200
    again = await flow.exchange(code)
    assert again.status_code == 400 and again.json()["error"] == "invalid_grant"
    assert "access_token" not in again.text
    assert await until_refused(flow.server, access)  # the grant the code made is gone
    refreshed = await flow.token(grant_type="refresh_token", refresh_token=first.json()["refresh_token"])
    assert refreshed.status_code == 400 and refreshed.json()["error"] == "invalid_grant"


async def test_wrong_pkce_verifier_issues_nothing(flow):
    code = await flow.code()
    wrong = await flow.exchange(code, verifier=secrets.token_urlsafe(48))
    assert wrong.status_code == 400 and wrong.json()["error"] == "invalid_grant"
    assert "access_token" not in wrong.text


async def test_expired_code_issues_nothing(flow, db_settings):
    code = await flow.code()
    conn = await asyncpg.connect(db_settings.admin_dsn())
    try:
        digest = hashlib.sha256(code.encode()).digest()
        await conn.execute(
            "UPDATE engram.oauth_codes SET expires_at = now() - interval '1 second' WHERE code_hash = $1", digest
        )
    finally:
        await conn.close()
    expired = await flow.exchange(code)
    assert expired.status_code == 400 and expired.json()["error"] == "invalid_grant"


async def test_refresh_rotates_and_reuse_revokes_the_family(flow):
    issued = (await flow.exchange(await flow.code())).json()
    rotated = await flow.token(grant_type="refresh_token", refresh_token=issued["refresh_token"])
    assert rotated.status_code == 200, rotated.text
    newer = rotated.json()
    assert newer["refresh_token"] != issued["refresh_token"]
    assert await mcp_status(flow.server, newer["access_token"]) == 200
    replay = await flow.token(grant_type="refresh_token", refresh_token=issued["refresh_token"])  # stolen and replayed
    assert replay.status_code == 400 and replay.json()["error"] == "invalid_grant"
    assert await until_refused(flow.server, newer["access_token"])
    after = await flow.token(grant_type="refresh_token", refresh_token=newer["refresh_token"])
    assert after.status_code == 400 and after.json()["error"] == "invalid_grant"


async def test_revocation_by_the_client(flow):
    issued = (await flow.exchange(await flow.code())).json()
    async with httpx2.AsyncClient() as http:
        revoked = await http.post(
            f"{flow.server.base}/revoke", data={"client_id": flow.client_id, "token": issued["refresh_token"]}
        )
    assert revoked.status_code == 200
    assert await until_refused(flow.server, issued["access_token"])


async def test_authorization_request_refusals(flow):
    async with httpx2.AsyncClient() as http:
        # A redirect URI the client did not register: an error page, never a redirect there.
        wrong = await http.get(flow.authorize_url(redirect_uri="https://evil.example/cb"))
        assert wrong.status_code == 400 and "location" not in wrong.headers
        unknown = await http.get(flow.authorize_url(client_id="no-such-client"))
        assert unknown.status_code == 400 and "location" not in unknown.headers
        for resource, error in ((None, "invalid_request"), ("https://elsewhere.example/mcp", "invalid_target")):
            answer = await http.get(flow.authorize_url(resource=resource))
            assert answer.status_code == 302
            query = parse_qs(urlsplit(answer.headers["location"]).query)
            assert query["error"] == [error] and "code" not in query
        plain = await http.get(flow.authorize_url(code_challenge_method="plain"))
        assert plain.status_code in (302, 400) and "code=" not in plain.headers.get("location", "")
        # A loopback redirect may use another port (RFC 8252), another path may not.
        other_port = await http.get(flow.authorize_url(redirect_uri="http://127.0.0.1:40001/callback"))
        assert other_port.status_code == 302 and "/oauth/consent" in other_port.headers["location"]
        other_path = await http.get(flow.authorize_url(redirect_uri="http://127.0.0.1:33418/elsewhere"))
        assert other_path.status_code == 400


async def test_forms_need_their_csrf_token(flow):
    browser = flow.person.browser
    page = await browser.get(flow.authorize_url(), follow_redirects=True)
    fields = hidden_fields(page.text)
    assert page.headers["content-security-policy"].startswith("default-src 'none'")
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    forged = await browser.post(
        f"{flow.server.base}/oauth/sign-in",
        data={"request": fields["request"], "username": flow.person.username, "password": PASSWORD},
    )
    assert forged.status_code == 403
    assert not any("session" in c for c in forged.headers.get_list("set-cookie"))
    # Signed in, a consent post without the token (or from another browser) is refused too.
    await flow.person.visit(flow.authorize_url())
    page = await browser.get(flow.authorize_url(), follow_redirects=True)
    fields = hidden_fields(page.text)
    async with httpx2.AsyncClient(cookies=browser.cookies) as other:
        missing = await other.post(
            f"{flow.server.base}/oauth/consent", data={"request": fields["request"], "decision": "allow"}
        )
    assert missing.status_code == 403 and "location" not in missing.headers


async def test_deny_answers_access_denied(flow):
    page = await flow.person.browser.get(flow.authorize_url(), follow_redirects=True)
    fields = hidden_fields(page.text)
    signed = await flow.person.browser.post(
        f"{flow.server.base}/oauth/sign-in", data={**fields, "username": flow.person.username, "password": PASSWORD}
    )
    consent = await flow.person.browser.get(f"{flow.server.base}{signed.headers['location']}")
    await flow.person.decide(str(consent.url), consent.text, "deny")
    assert flow.person.redirect["error"] == "access_denied" and "code" not in flow.person.redirect


async def test_wrong_passwords_are_throttled_and_disabled_users_refused(flow):
    browser = flow.person.browser
    page = await browser.get(flow.authorize_url(), follow_redirects=True)
    fields = hidden_fields(page.text)
    statuses = []
    for _ in range(4):
        answer = await browser.post(
            f"{flow.server.base}/oauth/sign-in", data={**fields, "username": flow.person.username, "password": "nope"}
        )
        statuses.append(answer.status_code)
    assert statuses[:3] == [401, 401, 401] and statuses[3] == 429  # max failures is 3 here
    right = await browser.post(
        f"{flow.server.base}/oauth/sign-in", data={**fields, "username": flow.person.username, "password": PASSWORD}
    )
    assert right.status_code == 429 and "retry-after" in right.headers  # even the right password, for a while

    other = add_user(flow.server, "disabled-tenant")
    assert engram(flow.server.env, "user", "disable", other.username).returncode == 0
    page = await other.browser.get(flow.authorize_url(), follow_redirects=True)
    refused = await other.browser.post(
        f"{flow.server.base}/oauth/sign-in",
        data={**hidden_fields(page.text), "username": other.username, "password": PASSWORD},
    )
    assert refused.status_code == 401 and "disabled" in refused.text


async def test_disabling_a_user_revokes_their_grants(flow):
    issued = (await flow.exchange(await flow.code())).json()
    assert await mcp_status(flow.server, issued["access_token"]) == 200
    assert engram(flow.server.env, "user", "disable", flow.person.username).returncode == 0
    assert await until_refused(flow.server, issued["access_token"])
    refreshed = await flow.token(grant_type="refresh_token", refresh_token=issued["refresh_token"])
    assert refreshed.status_code == 400


async def test_reader_role_limits_the_scopes(builtin, tenant):
    registered = (await register(builtin)).json()
    flow = Flow(builtin, add_user(builtin, tenant, role="reader"), registered["client_id"])
    issued = (await flow.exchange(await flow.code())).json()
    assert issued["scope"] == "memory:read"
    async with connect(builtin.url, issued["access_token"], mode="legacy") as c:
        assert ok(await c.call_tool("graph_stats", {}))
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "upsert_entities", "arguments": {}}}
    refused = await post_mcp(builtin, issued["access_token"], call)
    assert refused.status_code == 403 and 'scope="memory:read memory:write"' in refused.headers["www-authenticate"]


async def test_remembered_consent_skips_the_page(flow):
    flow.person.remember = True
    await flow.code()
    flow.person.pages.clear()
    flow.person.redirect = {}
    await flow.person.visit(flow.authorize_url())
    assert "code" in flow.person.redirect and not flow.person.pages  # straight back, no page shown


@pytest.mark.parametrize(
    "metadata",
    [
        {"redirect_uris": ["javascript:alert(1)"]},
        {"redirect_uris": ["http://evil.example/cb"]},
        {"redirect_uris": [f"https://a.example/{i}" for i in range(11)]},
        {"client_name": "x" * 201},
        {"client_name": "nul\x00"},
        {"redirect_uris": []},
        {"grant_types": ["client_credentials"]},
    ],
)
async def test_registration_refuses_bad_metadata(builtin, metadata):
    answer = await register(builtin, **metadata)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"] in ("invalid_client_metadata", "invalid_redirect_uri")


async def test_registration_body_is_bounded(builtin):
    async with httpx2.AsyncClient() as http:
        answer = await http.post(f"{builtin.base}/register", content=b"{" + b" " * 100_000 + b"}")
    assert answer.status_code == 413


async def test_rate_limits_answer_429(db_settings):
    """Counted in the database, so shared by replicas: start this address's window afresh."""
    conn = await asyncpg.connect(db_settings.admin_dsn())
    try:
        await conn.execute("DELETE FROM engram.rate_windows WHERE bucket LIKE 'register:%'")
    finally:
        await conn.close()
    with serve(
        db_settings, ENGRAM_AUTH_MODE="builtin", ENGRAM_EMBEDDING_PROVIDER="none", ENGRAM_REGISTER_PER_MINUTE="2"
    ) as server:
        statuses = [(await register(server)).status_code for _ in range(3)]
    assert statuses == [201, 201, 429]


async def test_a_second_process_accepts_tokens_and_rotation_keeps_them_valid(builtin, flow, db_settings):
    old = (await flow.exchange(await flow.code())).json()
    old_kid = jwt_part(old["access_token"], 0)["kid"]
    # A second process on the same database, serving the same public URL (replicas behind one ingress).
    with serve(
        db_settings, ENGRAM_AUTH_MODE="builtin", ENGRAM_EMBEDDING_PROVIDER="none", ENGRAM_PUBLIC_URL=builtin.base
    ) as second:
        assert await mcp_status(second, old["access_token"]) == 200
        rotated = engram(builtin.env, "keys", "rotate", "--activate-in", "0")
        assert rotated.returncode == 0, rotated.stderr
        new_kid = rotated.stdout.split()[1]
        refresh_token, new = old["refresh_token"], None
        for _ in range(40):  # the signing replica loads the new key within its reload period
            new = (await flow.token(grant_type="refresh_token", refresh_token=refresh_token)).json()
            refresh_token = new["refresh_token"]
            if jwt_part(new["access_token"], 0)["kid"] == new_kid:
                break
            await asyncio.sleep(0.25)
        assert new is not None and jwt_part(new["access_token"], 0)["kid"] == new_kid != old_kid
        for server in (builtin, second):
            assert await mcp_status(server, new["access_token"]) == 200
            assert await mcp_status(server, old["access_token"]) == 200  # the old key still verifies
        jwks = httpx2.get(f"{builtin.base}/.well-known/jwks.json").json()
        assert {old_kid, new_kid} <= {k["kid"] for k in jwks["keys"]}


# --- clients identified by their metadata document ---------------------------------------------


class DocumentServer:
    """Client metadata documents over real HTTPS on loopback, from a test certificate authority."""

    def __init__(self, directory: Path) -> None:
        self.port = free_port()
        self.base = f"https://localhost:{self.port}"
        ca = trustme.CA()
        cert = ca.issue_cert("localhost", "127.0.0.1")
        self.ca_file = directory / "ca.pem"
        ca.cert_pem.write_to_path(str(self.ca_file))
        key_file, cert_file = directory / "key.pem", directory / "cert.pem"
        cert.private_key_pem.write_to_path(str(key_file))
        cert.cert_chain_pems[0].write_to_path(str(cert_file))
        self.documents: dict[str, bytes] = {}

        async def document(request: Request) -> Response:
            body = self.documents.get(request.url.path)
            return Response(body, media_type="application/json") if body else Response(status_code=404)

        app = Starlette(routes=[Route("/{name:path}", document)])
        self._server = ThreadedServer(app, self.port, ssl_keyfile=key_file, ssl_certfile=cert_file)

    def publish(self, path: str, **overrides: Any) -> str:
        url = f"{self.base}{path}"
        document = {
            "client_id": url,
            "client_name": "Metadata Document Client",
            "redirect_uris": [REDIRECT],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
            **overrides,
        }
        self.documents[path] = orjson.dumps(document)
        return url

    def __enter__(self) -> DocumentServer:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop()


@pytest.fixture(scope="module")
def documents(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DocumentServer]:
    with DocumentServer(tmp_path_factory.mktemp("cimd")) as server:
        yield server


@pytest.fixture(scope="module")
def cimd(db_settings: Settings, documents: DocumentServer) -> Iterator[Server]:
    """A server that trusts the test CA and, for the tests only, accepts documents from loopback."""
    with serve(
        db_settings,
        ENGRAM_AUTH_MODE="builtin",
        ENGRAM_EMBEDDING_PROVIDER="none",
        ENGRAM_CLIENT_METADATA_ALLOW_HTTP_LOOPBACK="true",
        ENGRAM_REGISTER_PER_MINUTE="1000",
        ENGRAM_AUTHORIZE_PER_MINUTE="1000",
        SSL_CERT_FILE=str(documents.ca_file),
    ) as running:
        yield running


async def test_sdk_client_connects_with_a_metadata_document(cimd, documents, tenant):
    url = documents.publish("/oauth/client.json")
    metadata = httpx2.get(f"{cimd.base}/.well-known/oauth-authorization-server").json()
    assert metadata["client_id_metadata_document_supported"] is True
    person = add_user(cimd, tenant)
    http, storage = oauth_client(cimd.url, person, client_metadata_url=url)
    async with Client(streamable_http_client(cimd.url, http_client=http), mode="legacy") as c:
        ok(await c.call_tool("upsert_entities", {"entities": [{"name": "Known by its document", "type": "t"}]}))
    assert storage.client_info is not None and storage.client_info.client_id == url  # no registration
    assert "Metadata Document Client" in person.pages[-1]
    assert jwt_part(storage.tokens.access_token, 1)["client_id"] == url  # type: ignore[union-attr]


async def authorize_as(server: Server, client_id: str) -> httpx2.Response:
    """An authorization request from a client known only by its metadata document URL."""
    async with httpx2.AsyncClient() as http:
        return await http.get(
            f"{server.base}/authorize",
            params={
                "response_type": "code",
                "client_id": client_id,
                "redirect_uri": REDIRECT,
                "code_challenge": "x" * 43,
                "code_challenge_method": "S256",
                "resource": server.url,
            },
        )


@pytest.mark.parametrize(
    ("path", "overrides"),
    [
        ("/mismatch.json", {"client_id": "https://localhost/other.json"}),
        (
            "/big.json",
            {"client_name": "x" * 190, "contacts": ["a" * 190] * 10, "policy_uri": "https://a.example/" + "p" * 3000},
        ),
        ("/secret.json", {"token_endpoint_auth_method": "client_secret_basic"}),
        ("/evil-redirect.json", {"redirect_uris": ["http://evil.example/cb"]}),
    ],
)
async def test_bad_metadata_documents_are_refused(cimd, documents, path, overrides):
    answer = await authorize_as(cimd, documents.publish(path, **overrides))
    assert answer.status_code == 400 and "location" not in answer.headers


@pytest.mark.parametrize(
    "client_id",
    [
        "https://10.0.0.1/client.json",
        "https://169.254.169.254/latest/meta-data/client.json",
        "https://127.0.0.1/client.json",
        "https://localhost/client.json",
        "http://example.com/client.json",
    ],
)
async def test_metadata_documents_on_private_addresses_are_refused(builtin, client_id):
    answer = await authorize_as(builtin, client_id)
    assert answer.status_code == 400 and "location" not in answer.headers


async def test_dev_mode_signs_the_dev_user_in_by_itself(server):
    """`make run`: MCP clients connect by URL with OAuth, no account set up, on loopback only."""
    person = Person("", "")
    http, storage = oauth_client(server.url, person)
    async with Client(streamable_http_client(server.url, http_client=http), mode="legacy") as c:
        assert ok(await c.call_tool("graph_stats", {})) is not None
    assert 'name="password"' not in person.pages[-1]  # no sign-in form: the dev user is signed in
    assert jwt_part(storage.tokens.access_token, 1)["tenant_id"] == "demo"  # type: ignore[union-attr]


# --- a real browser ----------------------------------------------------------------------------

ARTIFACTS = ROOT / "test-artifacts"


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (scripts/system-deps.sh)")
async def test_a_person_signs_in_and_consents_in_chromium(flow):
    from playwright.async_api import async_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    landed: list[str] = []  # where the browser was sent back to: the client's redirect URI
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        page = await browser.new_page(viewport={"width": 900, "height": 900})

        async def capture(route: Any) -> None:  # the client's redirect URI, answered in its place
            await route.fulfill(status=200, content_type="text/html", body="<p>You can close this window.</p>")

        await page.route("http://127.0.0.1:33418/**", capture)
        await page.goto(flow.authorize_url())
        await page.get_by_label("Username").fill(flow.person.username)
        await page.get_by_label("Password").fill(PASSWORD)
        await page.screenshot(path=ARTIFACTS / "sign-in.png")
        await page.get_by_role("button", name="Sign in").click()
        await page.wait_for_url("**/oauth/consent?**")
        heading = await page.get_by_role("heading").inner_text()
        shown_client = await page.locator("#client-name").inner_text()
        shown_tenant = await page.get_by_role("radio").first.get_attribute("value")
        shot = ARTIFACTS / "consent.png"
        await page.screenshot(path=shot, full_page=True)
        async with page.expect_request("http://127.0.0.1:33418/**") as redirected:
            await page.get_by_role("button", name="Allow").click()
        landed.append((await redirected.value).url)
        await browser.close()

    assert "Hand-made client" in heading and shown_client == "Hand-made client"
    assert shown_tenant == flow.person_tenant
    image = shot.read_bytes()
    assert image[:8] == b"\x89PNG\r\n\x1a\n" and len(image) > 10_000  # a real, drawn page
    width, height = struct.unpack(">II", image[16:24])
    assert width == 900 and height >= 400
    query = parse_qs(urlsplit(landed[0]).query)
    assert query["state"] == [flow.params["state"]] and query["iss"] == [flow.server.base]
    issued = await flow.exchange(query["code"][0])
    assert issued.status_code == 200 and jwt_part(issued.json()["access_token"], 1)["tenant_id"] == flow.person_tenant


# --- signing in through an upstream OpenID Connect provider -------------------------------------


@pytest.fixture(scope="module")
def upstream(db_settings: Settings) -> Iterator[tuple[Server, StandInIssuer]]:
    with StandInIssuer() as issuer:
        provider = {
            "name": "corp",
            "label": "Corp SSO",
            "issuer": issuer.url,
            "client_id": UPSTREAM_CLIENT,
            "client_secret": "upstream-secret",
        }
        with serve(
            db_settings,
            ENGRAM_AUTH_MODE="builtin",
            ENGRAM_EMBEDDING_PROVIDER="none",
            ENGRAM_LOCAL_ACCOUNTS="false",
            ENGRAM_UPSTREAM_PROVIDERS=orjson.dumps([provider]).decode(),
        ) as server:
            yield server, issuer


async def test_sign_in_through_an_upstream_provider(upstream):
    server, _ = upstream
    registered = (await register(server)).json()
    person = Person("", "")  # signs in at the provider, not with a password here
    flow = Flow(server, person, registered["client_id"])
    page = await person.browser.get(flow.authorize_url(), follow_redirects=True)
    assert "Sign in with Corp SSO" in page.text and 'name="password"' not in page.text  # local accounts off
    start = re.search(r'href="([^"]*/oauth/upstream/corp[^"]*)"', page.text)
    assert start is not None
    # The provider approves at once and sends the browser back to Engram's callback.
    answer = await person.browser.get(urljoin(server.base, html.unescape(start[1])), follow_redirects=True)
    assert 'name="decision"' in answer.text, answer.text  # signed in: the consent page
    personal = re.findall(r'name="tenant" id="[^"]+" value="([^"]+)"', answer.text)
    assert len(personal) == 1 and personal[0].startswith("u-")  # a personal tenant under the auto policy
    await person.decide(str(answer.url), answer.text, "allow")
    issued = (await flow.exchange(person.redirect["code"])).json()
    assert jwt_part(issued["access_token"], 1)["tenant_id"] == personal[0]

    # The same upstream person again: the same Engram user (linked by provider and subject).
    again = Person("", "")
    page = await again.browser.get(flow.authorize_url(), follow_redirects=True)
    start = re.search(r'href="([^"]*/oauth/upstream/corp[^"]*)"', page.text)
    assert start is not None
    answer = await again.browser.get(urljoin(server.base, html.unescape(start[1])), follow_redirects=True)
    assert personal[0] in answer.text
    listed = engram(server.env, "user", "list")
    assert "ada@example.com" in listed.stdout


async def test_upstream_callback_without_state_is_refused(upstream):
    server, _ = upstream
    async with httpx2.AsyncClient() as http:
        answer = await http.get(f"{server.base}/oauth/upstream/corp/callback?code=forged&state=forged")
    assert answer.status_code == 400
    assert not any("engram-session" in c for c in answer.headers.get_list("set-cookie"))


async def test_every_step_is_recorded_and_counted(flow):
    await flow.exchange(await flow.code())
    events = engram(flow.server.env, "audit", "auth", "--limit", "200")
    assert events.returncode == 0, events.stderr
    mine = [line.split("\t") for line in events.stdout.splitlines() if flow.person.username in line]
    assert {(e[1], e[2]) for e in mine} >= {("sign_in", "ok"), ("consent", "ok"), ("token", "ok")}
    assert PASSWORD not in events.stdout
    metrics = httpx2.get(f"http://127.0.0.1:{flow.server.env['ENGRAM_METRICS_PORT']}/metrics").text
    assert 'engram_oauth_events_total{flow="token",outcome="ok"}' in metrics
    assert 'engram_oauth_events_total{flow="sign_in",outcome="ok"}' in metrics


@pytest.mark.parametrize(
    ("username", "password"),
    [("nul\x00name", PASSWORD), ("x" * 5000, PASSWORD), ("", ""), ("ada", "p" * 100_000), ("'; DROP TABLE x; --", "a")],
)
async def test_hostile_sign_in_forms_are_refused_cleanly(flow, username, password):
    page = await flow.person.browser.get(flow.authorize_url(), follow_redirects=True)
    answer = await flow.person.browser.post(
        f"{flow.server.base}/oauth/sign-in",
        data={**hidden_fields(page.text), "username": username, "password": password},
    )
    assert answer.status_code in (401, 413), answer.text
    assert not any("engram-session" in c for c in answer.headers.get_list("set-cookie"))


async def test_unused_registrations_expire(builtin, db_settings):
    from datetime import timedelta

    from app.store import oauth
    from app.store.connect import init_connection

    unused = (await register(builtin)).json()["client_id"]
    conn = await asyncpg.connect(db_settings.admin_dsn())
    await init_connection(conn)
    try:
        await conn.execute(
            "UPDATE engram.oauth_clients SET created_at = now() - interval '2 days' WHERE client_id = $1", unused
        )
        await oauth.sweep(conn, timedelta(days=1), timedelta(days=30))
        assert await oauth.client(conn, unused) is None
    finally:
        await conn.close()


async def test_ended_grants_are_swept_after_their_retention(builtin, flow, db_settings):
    """A grant revoked, or left without a token or code, more than the retention ago is removed with
    its rows; a live grant and one revoked lately stay (the revocation list reads the latter)."""
    from datetime import timedelta

    from app.store import oauth
    from app.store.connect import init_connection

    grants = {}
    for name in ("live", "revoked lately", "revoked long ago", "run dry long ago"):
        issued = (await flow.exchange(await flow.code())).json()
        grants[name] = jwt_part(issued["access_token"], 1)["sid"]
        if name.startswith("revoked"):
            async with httpx2.AsyncClient() as http:
                form = {"token": issued["refresh_token"], "client_id": flow.client_id}
                assert (await http.post(f"{builtin.base}/revoke", data=form)).status_code == 200
    conn = await asyncpg.connect(db_settings.admin_dsn())
    await init_connection(conn)
    try:
        age = "UPDATE engram.oauth_families SET created_at = now() - interval '40 days' WHERE id = $1::uuid"
        for sid in grants.values():
            await conn.execute(age, sid)
        await conn.execute(
            "UPDATE engram.oauth_families SET revoked_at = now() - interval '31 days' WHERE id = $1::uuid",
            grants["revoked long ago"],
        )
        await conn.execute(  # its last refresh token expired (and was swept), its code long used
            "DELETE FROM engram.oauth_refresh_tokens WHERE family_id = $1::uuid", grants["run dry long ago"]
        )
        await conn.execute("DELETE FROM engram.oauth_codes WHERE family_id = $1::uuid", grants["run dry long ago"])
        await oauth.sweep(conn, timedelta(days=1), timedelta(days=30))
        left = await conn.fetch(
            "SELECT id::text FROM engram.oauth_families WHERE id = ANY($1::uuid[])", list(grants.values())
        )
        assert {r[0] for r in left} == {grants["live"], grants["revoked lately"]}
        tokens = "SELECT count(*) FROM engram.oauth_refresh_tokens WHERE family_id = $1::uuid"
        assert await conn.fetchval(tokens, grants["revoked long ago"]) == 0  # gone with their grant
        assert await conn.fetchval(tokens, grants["live"]) > 0
    finally:
        await conn.close()


async def test_configured_clients_password_changes_and_revocation_by_command(builtin, tenant):
    added = engram(builtin.env, "client", "add", "notes-app", "--name", "Notes App", "--redirect-uri", REDIRECT)
    assert added.returncode == 0, added.stderr
    assert "notes-app\tstatic\tNotes App" in engram(builtin.env, "client", "list").stdout
    person = add_user(builtin, tenant)
    flow = Flow(builtin, person, "notes-app", tenant)
    issued = (await flow.exchange(await flow.code())).json()
    assert "Notes App" in person.pages[-1] and await mcp_status(builtin, issued["access_token"]) == 200

    passwd = ("user", "passwd", person.username, "--password-stdin")
    kept = engram(builtin.env, *passwd, "--keep-sessions", stdin="a brand new passphrase")
    assert kept.returncode == 0 and "signed out" not in kept.stdout, kept.stderr
    assert engram(builtin.env, *passwd, stdin="short").returncode != 0
    assert await mcp_status(builtin, issued["access_token"]) == 200  # --keep-sessions: grants live on

    revoked = engram(builtin.env, "revoke", "--user", person.username, "--client", "notes-app")
    assert revoked.returncode == 0 and revoked.stdout.startswith("1 grant")
    assert await until_refused(builtin, issued["access_token"])

    # An operator's reset signs the person out everywhere by default: sessions end, grants are revoked.
    again = (await flow.exchange(await flow.code())).json()  # the browser's sign-in session still holds
    assert await mcp_status(builtin, again["access_token"]) == 200
    reset = engram(builtin.env, *passwd, stdin="yet another passphrase")
    assert reset.returncode == 0 and "signed out everywhere" in reset.stdout, reset.stderr
    assert await until_refused(builtin, again["access_token"])
    refreshed = await flow.token(grant_type="refresh_token", refresh_token=again["refresh_token"])
    assert refreshed.status_code == 400 and refreshed.json()["error"] == "invalid_grant"
    assert engram(builtin.env, "client", "remove", "notes-app").returncode == 0
    assert "notes-app" not in engram(builtin.env, "client", "list").stdout
