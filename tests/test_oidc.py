"""Production auth: an OIDC issuer's JWTs, key rotation, introspection, API keys, the SDK's OAuth client."""

from __future__ import annotations

import base64
import hashlib
import hmac
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlsplit

import asyncpg
import httpx2
import orjson
import pytest
from joserfc import jwt
from joserfc.jwk import ECKey, RSAKey
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from app.auth import apikeys
from app.config import ENDPOINT_PATHS
from app.store import tenants
from tests.support.client import connect, error_code, mcp_headers, ok
from tests.support.oidc_issuer import CLIENT_ID, CLIENT_SECRET, StandInIssuer
from tests.support.server import ROOT, free_port, serve, server_env, start_server

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


class Oidc:
    def __init__(self, issuer: StandInIssuer, base: str, env: dict[str, str]) -> None:
        self.issuer = issuer
        self.base = base
        self.url = f"{base}/mcp"
        self.env = env

    def token(self, tenant: str, **extra) -> str:
        return self.issuer.sign(self.issuer.claims_for(self.url, tenant, **extra))

    def post(self, authorization: str | None) -> httpx2.Response:
        headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        if authorization is not None:
            headers["Authorization"] = authorization
        return httpx2.post(self.url, content=orjson.dumps(INIT), headers=headers, timeout=10)


@pytest.fixture(scope="module")
def oidc(db_settings) -> Iterator[Oidc]:
    with StandInIssuer() as issuer:
        port = free_port()
        env = server_env(
            db_settings,
            port,
            ENGRAM_AUTH_MODE="oidc",
            ENGRAM_OIDC_ISSUER=issuer.url,
            ENGRAM_OIDC_CLIENT_ID=CLIENT_ID,
            ENGRAM_OIDC_CLIENT_SECRET=CLIENT_SECRET,
            ENGRAM_JWKS_MIN_REFRESH_SECONDS="2",
            ENGRAM_API_KEY_CACHE_SECONDS="0",
            ENGRAM_SCOPE_CLAIMS="scope,scp,permissions",
        )
        process = start_server(env)
        issuer.audience = f"http://127.0.0.1:{port}/mcp"
        try:
            yield Oidc(issuer, f"http://127.0.0.1:{port}", env)
        finally:
            process.terminate()
            process.wait(timeout=30)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _bad_tokens(o: Oidc) -> dict[str, str | None]:
    iss = o.issuer
    good = o.token("t1")
    header, payload, signature = good.split(".")
    claims = iss.claims_for(o.url, "t1")
    now = int(time.time())
    stranger = ECKey.generate_key("P-256", auto_kid=True)
    real_kid = iss.keys[0].kid
    public_pem = iss.keys[0].as_pem(private=False)
    hs_signing_input = f"{_b64(orjson.dumps({'alg': 'HS256', 'kid': real_kid}))}.{payload}"
    hs_signature = _b64(hmac.new(public_pem, hs_signing_input.encode(), hashlib.sha256).digest())
    without = {k: {**claims} for k in ("aud", "exp", "sub", "iss")}
    for k, c in without.items():
        c.pop(k)
    return {
        "missing": None,
        "basic scheme": "Basic dXNlcjpwYXNz",
        "bearer garbage": "Bearer not-a-jwt",
        "three garbage parts": "Bearer aaa.bbb.ccc",
        "expired": "Bearer " + iss.sign({**claims, "iat": now - 7200, "nbf": now - 7200, "exp": now - 3600}),
        "not yet valid": "Bearer " + iss.sign({**claims, "nbf": now + 3600}),
        "wrong issuer": "Bearer " + iss.sign({**claims, "iss": "http://evil.example"}),
        "wrong audience": "Bearer " + iss.sign({**claims, "aud": "http://elsewhere.example/mcp"}),
        "audience list without us": "Bearer " + iss.sign({**claims, "aud": ["a", "b"]}),
        "no audience": "Bearer " + iss.sign(without["aud"]),
        "no expiry": "Bearer " + iss.sign(without["exp"]),
        "no subject": "Bearer " + iss.sign(without["sub"]),
        "no issuer": "Bearer " + iss.sign(without["iss"]),
        "expiry not a number": "Bearer " + iss.sign({**claims, "exp": "never"}),
        "unknown kid": "Bearer " + jwt.encode({"alg": "ES256", "kid": stranger.kid}, claims, stranger),
        "known kid, stranger's signature": "Bearer " + jwt.encode({"alg": "ES256", "kid": real_kid}, claims, stranger),
        "tampered payload": f"Bearer {header}.{_b64(orjson.dumps({**claims, 'tenant_id': 't2'}))}.{signature}",
        "tampered header": f"Bearer {_b64(orjson.dumps({'alg': 'ES384', 'kid': real_kid}))}.{payload}.{signature}",
        "alg none": f"Bearer {_b64(orjson.dumps({'alg': 'none', 'typ': 'JWT'}))}.{payload}.",
        "signature stripped": f"Bearer {header}.{payload}.",
        "HS256 with the public key": f"Bearer {hs_signing_input}.{hs_signature}",
        "RS256 by a stranger": "Bearer "
        + jwt.encode({"alg": "RS256", "kid": "rsa-1"}, claims, RSAKey.generate_key(2048)),
        "opaque unknown to the issuer": "Bearer opaque-token-nobody-issued",
        "API key malformed": "Bearer egk_short_secret",
        "API key unknown": f"Bearer egk_{'a' * 12}_{'b' * 43}",
    }


def test_bad_tokens_get_401_pointing_at_resource_metadata(oidc):
    cases = _bad_tokens(oidc)
    assert len(cases) >= 25
    for case, authorization in cases.items():
        response = oidc.post(authorization)
        assert response.status_code == 401, case
        challenge = response.headers["www-authenticate"]
        assert (
            challenge.startswith("Bearer ")
            and f'resource_metadata="{oidc.base}/.well-known/oauth-protected-resource/mcp"' in challenge
        ), case


def test_resource_metadata_names_the_issuer(oidc):
    for path in ("/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"):
        doc = httpx2.get(oidc.base + path, timeout=5).json()
        assert doc["resource"] == oidc.url and doc["authorization_servers"] == [oidc.issuer.url]
        assert doc["resource_name"] == "Engram memory"
    assert httpx2.get(oidc.base + "/.well-known/jwks.json", timeout=5).status_code == 404  # no dev issuer here


async def test_good_token_works_end_to_end(oidc, tenant):
    async with connect(oidc.url, oidc.token(tenant)) as c:
        ok(await c.call_tool("upsert_entities", {"entities": [{"name": "IdP user", "type": "person"}]}))
        assert ok(await c.call_tool("get_entity", {"name": "IdP user"}))["created_by"] == "user-1"


async def test_tenant_claim_falls_back_and_personal_tenants_are_private(oidc, tenant):
    by_org = oidc.issuer.sign(oidc.issuer.claims_for(oidc.url, tenant, tenant_id=None, org_id=tenant))
    async with connect(oidc.url, oidc.token(tenant)) as a:
        ok(await a.call_tool("upsert_entities", {"entities": [{"name": "Shared", "type": "t"}]}))
    async with connect(oidc.url, by_org) as b:
        ok(await b.call_tool("get_entity", {"name": "Shared"}))
    personal = oidc.issuer.sign({**oidc.issuer.claims_for(oidc.url, tenant), "tenant_id": None})
    async with connect(oidc.url, personal) as p:
        assert error_code(await p.call_tool("get_entity", {"name": "Shared"})) == "not_found"


def test_key_rotation_and_bogus_kid_flood(oidc, tenant):
    old_key = oidc.issuer.keys[0]
    time.sleep(2.1)  # past the refresh rate limit
    new_key = oidc.issuer.rotate()
    claims = oidc.issuer.claims_for(oidc.url, tenant)
    assert oidc.post("Bearer " + oidc.issuer.sign(claims, new_key)).status_code == 200  # unknown kid: refetched
    assert oidc.post("Bearer " + oidc.issuer.sign({**claims, "jti": "x"}, old_key)).status_code == 401

    time.sleep(2.1)
    before, started = oidc.issuer.jwks_fetches, time.monotonic()
    for _ in range(30):
        stranger = ECKey.generate_key("P-256", auto_kid=True)
        bogus = jwt.encode({"alg": "ES256", "kid": stranger.kid}, claims, stranger)
        assert oidc.post("Bearer " + bogus).status_code == 401
    # ENGRAM_JWKS_MIN_REFRESH_SECONDS=2: at most one refetch per 2 s window, not one per bogus kid.
    windows = 1 + int((time.monotonic() - started) / 2)
    fetched = oidc.issuer.jwks_fetches - before
    assert 1 <= fetched <= windows < 30, (fetched, windows)


def test_opaque_tokens_through_introspection(oidc, tenant):
    now = int(time.time())
    oidc.issuer.opaque["opaque-good"] = {
        "active": True,
        "sub": "svc",
        "client_id": "svc",
        "scope": "memory:read",
        "exp": now + 300,
        "aud": oidc.url,
        "tenant_id": tenant,
    }
    oidc.issuer.opaque["opaque-other-aud"] = {**oidc.issuer.opaque["opaque-good"], "aud": "http://other/mcp"}
    oidc.issuer.opaque["opaque-inactive"] = {"active": False}
    oidc.issuer.opaque["opaque-no-aud"] = {k: v for k, v in oidc.issuer.opaque["opaque-good"].items() if k != "aud"}
    assert oidc.post("Bearer opaque-good").status_code == 200
    assert oidc.post("Bearer opaque-other-aud").status_code == 401
    assert oidc.post("Bearer opaque-inactive").status_code == 401
    assert oidc.post("Bearer opaque-no-aud").status_code == 401  # an active token for no one in particular


@pytest.mark.parametrize(
    "scopes",
    [
        {"scp": ["memory:read", "memory:write"]},  # Entra, Okta: a list
        {"scp": "memory:read memory:write"},  # a string
        {"permissions": ["memory:read", "memory:write"]},  # Auth0 RBAC, with ENGRAM_SCOPE_CLAIMS
    ],
)
async def test_scopes_from_other_claims(oidc, tenant, scopes):
    async with connect(oidc.url, oidc.token(tenant, scope="", **scopes)) as c:
        ok(await c.call_tool("upsert_entities", {"entities": [{"name": "Scoped", "type": "t"}]}))


@pytest.mark.parametrize("typ", ["dpop+jwt", "id_token+jwt", "logout+jwt"])
def test_tokens_of_other_types_are_refused(oidc, tenant, typ):
    """RFC 9068: an access token is `at+jwt` (or plain `JWT`); an ID token or DPoP proof is not one."""
    token = oidc.issuer.sign(oidc.issuer.claims_for(oidc.url, tenant), header={"typ": typ})
    assert oidc.post(f"Bearer {token}").status_code == 401


async def test_sdk_oauth_client_discovers_and_signs_in(oidc):
    captured: dict[str, str] = {}

    class Memory:
        tokens: OAuthToken | None = None

        async def get_tokens(self) -> OAuthToken | None:
            return self.tokens

        async def set_tokens(self, tokens: OAuthToken) -> None:
            self.tokens = tokens

        async def get_client_info(self) -> OAuthClientInformationFull | None:  # registered beforehand
            return OAuthClientInformationFull(
                client_id=CLIENT_ID, redirect_uris=["http://127.0.0.1:9/callback"], token_endpoint_auth_method="none"
            )

        async def set_client_info(self, info: OAuthClientInformationFull) -> None:
            pass

    async def redirect(url: str) -> None:  # the "browser": the issuer approves at once
        async with httpx2.AsyncClient() as browser:
            location = (await browser.get(url)).headers["location"]
        captured.update({k: v[0] for k, v in parse_qs(urlsplit(location).query).items()})

    async def callback() -> AuthorizationCodeResult:
        return AuthorizationCodeResult(code=captured["code"], state=captured["state"], iss=captured["iss"])

    auth = OAuthClientProvider(
        oidc.url,
        OAuthClientMetadata(
            client_name="tests",
            redirect_uris=["http://127.0.0.1:9/callback"],
            scope="memory:read memory:write",
            token_endpoint_auth_method="none",
        ),
        Memory(),
        redirect,
        callback,
    )
    http = httpx2.AsyncClient(auth=auth, timeout=httpx2.Timeout(30))
    async with Client(streamable_http_client(oidc.url, http_client=http), mode="legacy") as c:
        ok(await c.call_tool("upsert_entities", {"entities": [{"name": "Signed in", "type": "t"}]}))
    assert captured["iss"] == oidc.issuer.url


def _engram(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


async def test_api_keys_create_use_list_revoke_expire(oidc, tenant):
    made = _engram(oidc.env, "apikey", "create", "--tenant", tenant, "--scope", "memory:read", "--name", "ci bot")
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip()
    assert key.startswith("egk_") and key not in made.stderr
    key_id = key.split("_")[1]

    async with connect(oidc.url, oidc.token(tenant)) as writer:
        ok(await writer.call_tool("upsert_entities", {"entities": [{"name": "Fact", "type": "t"}]}))
    async with connect(oidc.url, key) as bot:
        assert ok(await bot.call_tool("get_entity", {"name": "Fact"}))["name"] == "Fact"
    for drop_in in ("memory", "neo4j"):  # a key is the tenant's, not a resource's: good at every endpoint
        async with connect(f"{oidc.url}/{drop_in}", key) as bot:
            assert [e["name"] for e in ok(await bot.call_tool("read_graph", {}))["entities"]] == ["Fact"]
    refused = httpx2.post(
        oidc.url,
        headers=mcp_headers(key),
        content=orjson.dumps(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "upsert_entities", "arguments": {"entities": [{"name": "x", "type": "t"}]}},
            }
        ),
        timeout=10,
    )
    assert refused.status_code == 403 and 'scope="memory:read memory:write"' in refused.headers["www-authenticate"]

    listed = _engram(oidc.env, "apikey", "list", "--tenant", tenant)
    assert key_id in listed.stdout and "memory:read" in listed.stdout and "active" in listed.stdout
    assert key.split("_", 2)[2] not in listed.stdout  # the secret is never shown again

    revoked = _engram(oidc.env, "apikey", "revoke", key_id)
    assert revoked.returncode == 0, revoked.stderr
    assert oidc.post(f"Bearer {key}").status_code == 401
    assert "revoked" in _engram(oidc.env, "apikey", "list", "--tenant", tenant).stdout

    key_id2, key2, digest = apikeys.generate()
    conn = await asyncpg.connect(oidc.env["ENGRAM_ADMIN_DATABASE_URL"])
    try:
        await tenants.add_key(conn, tenant, key_id2, digest, ["memory:read"], "old", datetime.now(UTC) - timedelta(1))
        stored = await conn.fetchval("SELECT secret_hash FROM engram.api_keys WHERE id = $1", key_id2)
    finally:
        await conn.close()
    assert oidc.post(f"Bearer {key2}").status_code == 401  # expired
    assert key2.split("_", 2)[2].encode() not in bytes(stored)
    assert oidc.post(f"Bearer {key[:-1]}{'A' if key[-1] != 'A' else 'B'}").status_code == 401  # wrong secret


def test_without_configured_audiences_each_endpoint_takes_tokens_for_itself_only(oidc, tenant):
    """ENGRAM_OIDC_AUDIENCES unset: an endpoint's own URL is its audience, as RFC 8707 has it."""
    urls = {path: f"{oidc.base}{path}" for path in ENDPOINT_PATHS.values()}
    for path, url in urls.items():
        token = oidc.issuer.sign(oidc.issuer.claims_for(url, tenant))
        for other, other_url in urls.items():
            answer = httpx2.post(other_url, content=orjson.dumps(INIT), headers=_headers(token), timeout=10)
            if other == path:
                assert answer.status_code == 200, (path, answer.text)
            else:
                challenge = answer.headers.get("www-authenticate", "")
                assert answer.status_code == 401, (path, other)
                assert f'resource_metadata="{oidc.base}/.well-known/oauth-protected-resource{other}"' in challenge


def test_configured_audiences_hold_at_every_endpoint(db_settings, tenant):
    """ENGRAM_OIDC_AUDIENCES: the identity provider's one audience for the API, at every endpoint."""
    with (
        StandInIssuer() as issuer,
        serve(
            db_settings,
            ENGRAM_AUTH_MODE="oidc",
            ENGRAM_OIDC_ISSUER=issuer.url,
            ENGRAM_OIDC_AUDIENCES="api://engram",
            ENGRAM_EMBEDDING_PROVIDER="none",
        ) as server,
    ):
        for audience, status in (("api://engram", 200), (server.url, 401)):
            token = issuer.sign(issuer.claims_for(audience, tenant))
            for path in ENDPOINT_PATHS.values():
                url = f"{server.base}{path}"
                answer = httpx2.post(url, content=orjson.dumps(INIT), headers=_headers(token), timeout=10)
                assert answer.status_code == status, (audience, path)


def _headers(token: str) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }


async def test_managed_tenants_must_exist(db_settings, tenant):
    with serve(db_settings, ENGRAM_TENANT_POLICY="managed") as server:
        env = server.env
        async with server.client(tenant) as c:
            assert error_code(await c.call_tool("get_entity", {"name": "x"})) == "forbidden"
        created = _engram(env, "tenant", "create", tenant)
        assert created.returncode == 0, created.stderr
        async with server.client(tenant) as c:
            ok(await c.call_tool("upsert_entities", {"entities": [{"name": "x", "type": "t"}]}))
        shown = _engram(env, "tenant", "show", tenant)
        assert "entities: 1" in shown.stdout
        assert tenant in _engram(env, "tenant", "list").stdout
        deleted = _engram(env, "tenant", "delete", tenant)
        assert deleted.returncode == 0, deleted.stderr
        assert tenant not in _engram(env, "tenant", "list").stdout
