"""How the console answers: templates, the Content-Security-Policy and other headers every page
carries, its static files under versioned URLs, and errors as pages.

The policy allows scripts, styles and fetches from this origin only — no inline script or style —
so the graph view's one script is a file, and every page works without it.
"""

from __future__ import annotations

import hashlib
import mimetypes
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from markupsafe import Markup, escape
from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from app import web

HERE = Path(__file__).parent
TEMPLATES = Jinja2Templates(directory=HERE / "templates")


def marked(snippet: str) -> Markup:
    """A search snippet's **marked** words as <mark>, everything else escaped."""
    parts = snippet.split("**")
    return Markup("").join(Markup("<mark>{}</mark>").format(p) if i % 2 else escape(p) for i, p in enumerate(parts))


TEMPLATES.env.filters["marked"] = marked
CSP = web.policy(scripts=True)


def secure(response: Response) -> Response:
    """Every console answer: the strict policy (own scripts allowed), never framed, never sniffed,
    never cached, no referrer."""
    return web.secure(response, CSP)


@dataclass(frozen=True, slots=True)
class Asset:
    body: bytes
    media_type: str


class Static:
    """The package's static files, each under a URL with its content's hash: cached for a year,
    and a new release's file has a new URL."""

    def __init__(self, prefix: str, *directories: Path) -> None:
        self._assets: dict[str, Asset] = {}
        digest = hashlib.sha256()
        for path in sorted((p for d in directories for p in d.iterdir()), key=lambda p: p.name):
            body = path.read_bytes()
            digest.update(path.name.encode() + b"\0" + body)
            media = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
            self._assets[path.name] = Asset(body, f"{media}; charset=utf-8" if media.startswith("text/") else media)
        self.version = digest.hexdigest()[:12]
        self.base = f"{prefix}/{self.version}"

    async def serve(self, request: Request) -> Response:
        name = request.path_params["name"]
        asset = self._assets.get(name)
        if asset is None or request.path_params["version"] != self.version:
            return secure(Response("not found", status_code=404, media_type="text/plain"))
        response = Response(asset.body, media_type=asset.media_type)
        response.headers["Cache-Control"] = "public, max-age=31536000, immutable"
        return secure(response)


def render(request: Request, template: str, context: Mapping[str, Any], status: int = 200, **base: Any) -> Response:
    response = TEMPLATES.TemplateResponse(request, template, {**base, **context}, status_code=status)
    return secure(response)


def query(**params: object) -> str:
    """A query string of the given parameters that are set."""
    return urlencode({k: v for k, v in params.items() if v not in (None, "")})
