"""Reading back the one-click install links the Connect page gives (app/console/client_setups.py),
the way VS Code and Cursor read them: the configuration each carries."""

from __future__ import annotations

import base64
import json
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit


def decode_vscode(link: str) -> Any:
    """`vscode:mcp/install?<URI-encoded JSON>`: the JSON."""
    scheme, _, query = link.partition("?")
    assert scheme == "vscode:mcp/install"
    return json.loads(unquote(query))


def decode_cursor(link: str) -> tuple[str, Any]:
    """`cursor://anysphere.cursor-deeplink/mcp/install?name=…&config=<base64 JSON>`: the name and JSON."""
    parts = urlsplit(link)
    assert (parts.scheme, parts.netloc, parts.path) == ("cursor", "anysphere.cursor-deeplink", "/mcp/install")
    query = parse_qs(parts.query, strict_parsing=True)
    return query["name"][0], json.loads(base64.b64decode(query["config"][0], validate=True))
