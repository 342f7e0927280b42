"""The browsers a test drives: headless Chromium (Debian's, through Playwright) for what a person
sees, and a browser played with plain HTTP (cookies, forms and their CSRF field)."""

from __future__ import annotations

import shutil
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx2

from tests.support.oauth_agent import hidden_fields
from tests.support.server import ROOT

ARTIFACTS = ROOT / "test-artifacts" / "console"
CHROMIUM = shutil.which("chromium")
# Root in a container has no sandbox; the rest keeps Chromium off a network this machine does not have.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def png_size(path: Any) -> tuple[int, int]:
    image = path.read_bytes()
    assert image[:8] == b"\x89PNG\r\n\x1a\n" and len(image) > 10_000  # a real, drawn page
    return struct.unpack(">II", image[16:24])


@asynccontextmanager
async def console_in_chromium(blocked: list[str], permissions: list[str] | None = None) -> AsyncIterator[Any]:
    """A page of headless Chromium (screenshots go to ARTIFACTS); what the Content Security Policy
    blocks is appended to `blocked`. `permissions` are granted to the page's context (e.g.
    "clipboard-read" and "clipboard-write", to read back what a page copied)."""
    from playwright.async_api import async_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        page = await browser.new_page(viewport={"width": 1200, "height": 900}, permissions=permissions or [])
        page.on("console", lambda m: blocked.append(m.text) if "Content Security Policy" in m.text else None)
        try:
            yield page
        finally:
            await browser.close()


@dataclass
class Browser:
    """A browser played with plain HTTP: its client keeps the session's cookies."""

    http: httpx2.AsyncClient

    async def get(self, path: str, **kw: Any) -> httpx2.Response:
        return await self.http.get(path, **kw)

    async def page(self, path: str) -> str:
        answer = await self.http.get(path)
        assert answer.status_code == 200, answer.text
        return answer.text

    def csrf(self, page: str) -> str:
        return hidden_fields(page)["csrf"]

    async def post(self, path: str, data: dict[str, str], **kw: Any) -> httpx2.Response:
        return await self.http.post(path, data=data, **kw)
