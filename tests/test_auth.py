"""Requests without a valid token are refused with 401 and a pointer to the resource metadata."""

from __future__ import annotations

import base64
import time

import httpx2
import orjson
import pytest
from joserfc import jwt
from joserfc.jwk import ECKey

from app.auth.principal import READ, WRITE
from tests.support.client import connect, error_code

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


def _post(server, token: str | None) -> httpx2.Response:
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = token if token.startswith("Basic ") else f"Bearer {token}"
    return httpx2.post(server.url, content=orjson.dumps(INIT), headers=headers, timeout=10)


def _bad_tokens(server) -> dict[str, str | None]:
    good = server.token("t1")
    header, payload, signature = good.split(".")
    claims = orjson.loads(base64.urlsafe_b64decode(payload + "=="))
    tampered = base64.urlsafe_b64encode(orjson.dumps({**claims, "tenant_id": "t2"})).rstrip(b"=").decode()
    stranger = ECKey.generate_key("P-256", auto_kid=True)
    now = int(time.time())
    unsigned = base64.urlsafe_b64encode(b'{"alg":"none"}').rstrip(b"=").decode() + "." + payload + "."
    return {
        "missing": None,
        "blank scheme": "Basic dXNlcjpwYXNz",
        "garbage": "not-a-jwt",
        "wrong audience": _sign(server, {**claims, "aud": "http://elsewhere.example/mcp"}),
        "wrong issuer": _sign(server, {**claims, "iss": "http://evil.example"}),
        "expired token": _sign(server, {**claims, "iat": now - 7200, "nbf": now - 7200, "exp": now - 3600}),
        "not yet valid": _sign(server, {**claims, "nbf": now + 3600}),
        "badly signed": jwt.encode({"alg": "ES256", "kid": stranger.kid}, claims, stranger),
        "tampered payload": f"{header}.{tampered}.{signature}",
        "alg none": unsigned,
    }


def _sign(server, claims: dict) -> str:
    from app.auth.devkeys import load_or_create_key

    key = load_or_create_key(server.settings.dev_key_file)
    return jwt.encode({"alg": "ES256", "kid": key.kid}, claims, key)


def test_bad_tokens_get_401_with_resource_metadata(server):
    for case, token in _bad_tokens(server).items():
        response = _post(server, token)
        assert response.status_code == 401, case
        challenge = response.headers["www-authenticate"]
        assert challenge.startswith("Bearer ") and "resource_metadata=" in challenge, case
        assert f"{server.base}/.well-known/oauth-protected-resource/mcp" in challenge, case


def test_good_token_is_accepted(server):
    assert _post(server, server.token("t1")).status_code == 200


def test_resource_metadata_is_where_clients_look(server):
    for path in ("/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"):
        doc = httpx2.get(server.base + path, timeout=5).json()
        assert doc["resource"] == server.url
        assert doc["authorization_servers"] == [server.base]
        assert {"memory:read", "memory:write"} <= set(doc["scopes_supported"])
    jwks = httpx2.get(server.base + "/.well-known/jwks.json", timeout=5).json()
    assert jwks["keys"][0]["kty"] == "EC" and "d" not in jwks["keys"][0]


@pytest.mark.parametrize("host", ["evil.example", "attacker.test:8000"])
def test_dns_rebinding_hosts_are_refused(server, host):
    headers = {
        "Authorization": f"Bearer {server.token('t1')}",
        "Host": host,
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    response = httpx2.post(server.url, content=orjson.dumps(INIT), headers=headers, timeout=10)
    assert response.status_code == 421


def _call(server, token: str, tool: str, arguments: dict) -> httpx2.Response:
    body = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "Authorization": f"Bearer {token}",
        "MCP-Protocol-Version": "2025-11-25",
    }
    return httpx2.post(server.url, content=orjson.dumps(body), headers=headers, timeout=10)


async def test_read_scope_cannot_write(server, tenant):
    read_only = server.token(tenant, scopes=(READ,))
    refused = _call(server, read_only, "upsert_entities", {"entities": [{"name": "x", "type": "t"}]})
    assert refused.status_code == 403
    challenge = refused.headers["www-authenticate"]
    # Every scope the call needs: the tool's and the one the token holds, so that the token the
    # client gets after stepping up still reads.
    assert 'error="insufficient_scope"' in challenge and 'scope="memory:read memory:write"' in challenge
    assert "resource_metadata=" in challenge
    write_only = server.token(tenant, scopes=(WRITE,))
    refused = _call(server, write_only, "get_entity", {"name": "x"})
    assert refused.status_code == 403 and 'scope="memory:read memory:write"' in refused.headers["www-authenticate"]
    async with connect(server.url, read_only) as c:
        assert error_code(await c.call_tool("get_entity", {"name": "x"})) == "not_found"  # reads work; nothing written
        listed = {t.name: t for t in (await c.list_tools()).tools}
    # A read-only token is shown only the tools it may call (the write tools answer 403, above).
    assert "get_entity" in listed and "upsert_entities" not in listed
