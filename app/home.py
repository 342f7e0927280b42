"""`/`: what a visitor finds at the server's root. A browser is sent to the console when it runs;
anyone else (an MCP client probing the base URL, a script, a browser when the console is off) gets
a short JSON document saying what this server is and where its MCP endpoints are, never a 404 that
reads like a broken deployment. Nothing here needs a credential or tells anything about tenants."""

from __future__ import annotations

from collections.abc import Mapping

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from app.version import VERSION

HEADERS = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}


def home_routes(base_url: str, endpoints: Mapping[str, str], console: str | None) -> list[Route]:
    """`endpoints`: tool set → MCP URL; `console`: the console's URL, None when it does not run."""
    about = {
        "name": "Engram",
        "description": "A remote, multi-tenant knowledge-graph memory for AI assistants, served over MCP.",
        "version": VERSION,
        "mcp": dict(endpoints),
        "oauth_protected_resource": f"{base_url}/.well-known/oauth-protected-resource",
        "console": console,
    }
    first = endpoints.get("native") or next(iter(endpoints.values()))

    async def home(request: Request) -> Response:
        if request.method == "POST":  # an MCP client given the bare base URL: point at the endpoint
            message = f"This is not an MCP endpoint: MCP is served at {first}"
            return JSONResponse({"error": "not_found", "message": message, **about}, 404, headers=HEADERS)
        if console and "text/html" in request.headers.get("accept", ""):
            return RedirectResponse(console, status_code=303, headers=HEADERS)
        return JSONResponse(about, headers=HEADERS)

    return [Route("/", home, methods=["GET", "HEAD", "POST"])]
