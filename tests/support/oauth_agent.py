"""A person at a browser, played with plain HTTP: follows the authorization redirect, signs in with
a real form post, chooses a tenant and approves on the consent page, and hands the code back to
the SDK client as its redirect URI would."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx2
from mcp.client.auth import OAuthClientProvider
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

_INPUT = re.compile(r'<input type="hidden" name="(\w+)" value="([^"]*)"')


def hidden_fields(page: str) -> dict[str, str]:
    return {name: html.unescape(value) for name, value in _INPUT.findall(page)}


class MemoryStorage:
    """The SDK client's token storage, in memory."""

    def __init__(self, client_info: OAuthClientInformationFull | None = None) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info = client_info

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, info: OAuthClientInformationFull) -> None:
        self.client_info = info


@dataclass
class Person:
    username: str
    password: str
    tenant: str | None = None  # which tenant to pick on the consent page (the first if None)
    remember: bool = False
    browser: httpx2.AsyncClient = field(default_factory=lambda: httpx2.AsyncClient(timeout=30))
    redirect: dict[str, str] = field(default_factory=dict)  # the query the client's redirect URI received
    pages: list[str] = field(default_factory=list)

    async def visit(self, url: str) -> None:
        """From the authorization URL to the client's redirect URI, through sign-in and consent."""
        response = await self.browser.get(url)
        while response.status_code in (302, 303):
            location = urljoin(str(response.url), response.headers["location"])
            if not location.startswith(str(response.url)[: len("http://127.0.0.1:")]) or "/oauth/" not in location:
                self.redirect = {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}
                return
            response = await self.browser.get(location)
        page = response.text
        self.pages.append(page)
        if 'name="password"' in page:
            fields = hidden_fields(page)
            response = await self.browser.post(
                urljoin(str(response.url), "/oauth/sign-in"),
                data={**fields, "username": self.username, "password": self.password},
            )
            assert response.status_code == 303, response.text
            await self.visit(urljoin(str(response.url), response.headers["location"]))
            return
        assert 'name="decision"' in page, page
        await self.decide(str(response.url), page, "allow")

    async def decide(self, url: str, page: str, decision: str) -> None:
        fields = hidden_fields(page)
        tenants = re.findall(r'name="tenant" id="[^"]+" value="([^"]+)"', page)
        data: dict[str, Any] = {**fields, "decision": decision, "tenant": self.tenant or tenants[0]}
        if self.remember:
            data["remember"] = "yes"
        response = await self.browser.post(urljoin(url, "/oauth/consent"), data=data)
        assert response.status_code == 303, response.text
        self.redirect = {k: v[0] for k, v in parse_qs(urlsplit(response.headers["location"]).query).items()}

    async def callback(self) -> AuthorizationCodeResult:
        return AuthorizationCodeResult(
            code=self.redirect["code"], state=self.redirect.get("state"), iss=self.redirect.get("iss")
        )


def oauth_client(
    url: str, person: Person, storage: MemoryStorage | None = None, client_metadata_url: str | None = None
) -> tuple[httpx2.AsyncClient, MemoryStorage]:
    """An HTTP client that signs in through the SDK's OAuthClientProvider, knowing only the URL."""
    storage = storage or MemoryStorage()
    provider = OAuthClientProvider(
        url,
        OAuthClientMetadata(
            client_name="Test Assistant",
            redirect_uris=["http://127.0.0.1:33418/callback"],
            token_endpoint_auth_method="none",
        ),
        storage,
        person.visit,
        person.callback,
        client_metadata_url=client_metadata_url,
    )
    return httpx2.AsyncClient(auth=provider, timeout=httpx2.Timeout(30, read=120)), storage
