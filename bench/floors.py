"""The HTTP floors Engram is compared with: `python -m bench.floors mcp|starlette PORT`.

`mcp`: a bare MCPServer of the same SDK with one trivial tool, served with the transport options
`engram serve` uses (stateless, JSON responses). `starlette`: a bare Starlette handler answering
every POST with a fixed JSON-RPC result. Both run under uvicorn exactly as `engram serve` does.
"""

from __future__ import annotations

import sys

import uvicorn
from mcp.server import MCPServer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

PING_RESULT = {"content": [{"type": "text", "text": "pong"}], "structuredContent": {"result": "pong"}, "isError": False}


def mcp_app() -> Starlette:
    mcp = MCPServer(name="floor", log_level="WARNING")

    @mcp.tool()
    async def ping(text: str = "pong") -> str:
        """Answer at once: the cost of the SDK and transport alone."""
        return text

    return mcp.streamable_http_app(streamable_http_path="/mcp", stateless_http=True, json_response=True)


def starlette_app() -> Starlette:
    async def handle(request: Request) -> JSONResponse:
        body = await request.json()
        return JSONResponse({"jsonrpc": "2.0", "id": body.get("id"), "result": PING_RESULT})

    return Starlette(routes=[Route("/mcp", handle, methods=["POST"])])


def main() -> None:
    kind, port = sys.argv[1], int(sys.argv[2])
    app = {"mcp": mcp_app, "starlette": starlette_app}[kind]()
    # The same server options as `engram serve`.
    uvicorn.run(app, host="127.0.0.1", port=port, loop="uvloop", http="httptools", log_level="warning")


if __name__ == "__main__":
    main()
