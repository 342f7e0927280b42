"""The Connect page: how a person connects an assistant to this tenant's memory. The MCP URLs of
every served tool set, copy-paste settings for the assistants people use, and (for the tenant's
administrators) a form that makes an API key for a headless agent, through the administration
page's own action (app/console/admin.py). Nothing here chooses a tenant: the URLs are the server's,
the tenant is the one each client's sign-in (or key) is for."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from app.auth.principal import READ, WRITE
from app.console.hook_setups import hook_setups
from app.console.web import TEMPLATES

if TYPE_CHECKING:
    from app.console.kit import Kit, Visit

# What each endpoint serves, in the order of ENDPOINT_PATHS (docs/tools.md).
SERVES = {
    "native": "Engram's own tools (recall, search, upsert_entities, add_episodes, neighbors, query_graph, …)",
    "memory": "the tools of @modelcontextprotocol/server-memory, for assistants set up for it",
    "neo4j": "the tools of mcp-neo4j-memory, for assistants set up for it",
    "chatgpt": "search and fetch, for ChatGPT's connectors and deep research",
}


@dataclass(frozen=True, slots=True)
class Setup:
    """One assistant's settings: where they go, and the text to paste."""

    id: str
    name: str
    where: str
    text: str


def _json(settings: dict[str, object]) -> str:
    return json.dumps(settings, indent=2, ensure_ascii=False)


def setups(endpoints: dict[str, str]) -> list[Setup]:
    """Each assistant's settings for these endpoints. Clients that speak MCP's OAuth need only the
    URL: they sign in through this server's pages and ask which tenant to use."""
    native = endpoints.get("native", next(iter(endpoints.values()), ""))
    chatgpt = endpoints.get("chatgpt", native)
    return [
        Setup("claude-code", "Claude Code", "in a terminal (then /mcp in Claude Code to sign in)",
              f"claude mcp add --transport http engram {native}"),
        Setup("vscode", "VS Code", ".vscode/mcp.json in your project (or MCP: Add Server…)",
              _json({"servers": {"engram": {"type": "http", "url": native}}})),
        Setup("cursor", "Cursor", "~/.cursor/mcp.json (or .cursor/mcp.json in a project)",
              _json({"mcpServers": {"engram": {"url": native}}})),
        Setup("claude-ai", "claude.ai", "Settings → Connectors → Add custom connector: name Engram, this URL",
              native),
        Setup("chatgpt", "ChatGPT",
              "Settings → Connectors → Advanced → Developer mode, Create: this URL, authentication OAuth", chatgpt),
    ]  # fmt: skip


def agent_setups(endpoint: str, key: str) -> list[Setup]:
    """A headless agent's settings with an API key (`key`: the secret, or a placeholder)."""
    header = f"Authorization: Bearer {key}"
    return [
        Setup("agent-claude-code", "Claude Code, headless", "in a terminal",
              f'claude mcp add --transport http engram {endpoint} --header "{header}"'),
        Setup("agent-json", "Any MCP client", "its server settings (JSON)",
              _json({"mcpServers": {"engram": {"type": "http", "url": endpoint,
                                               "headers": {"Authorization": f"Bearer {key}"}}}})),
        Setup("agent-curl", "Check it", "a shell: lists the tools",
              f"curl -s {endpoint} -H '{header}' -H 'Content-Type: application/json' "
              "-H 'Accept: application/json, text/event-stream' "
              """-d '{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}'"""),
    ]  # fmt: skip


# The key's page (app/console/admin.py renders it) fills these settings in with the new key.
TEMPLATES.env.globals["agent_setups"] = agent_setups


class ConnectPage:
    def __init__(self, kit: Kit, endpoints: dict[str, str], base_url: str) -> None:
        self.c = kit
        self.endpoints = endpoints
        self.base_url = base_url  # the server's own address: where Claude Code's hooks post

    async def show(self, request: Request, visit: Visit) -> Response:
        context = {
            "endpoints": [(name, url, SERVES[name]) for name, url in self.endpoints.items()],
            "setups": setups(self.endpoints),
            "agent": agent_setups(self.native, "egk_…"),
            "hook_setups": hook_setups(self.base_url),
            # A key never holds more than its maker: the memory scopes this person has.
            "grantable": [s for s in (READ, WRITE) if s in visit.who.scopes],
        }
        return self.c.page(request, "connect.html", context, visit)

    @property
    def native(self) -> str:
        return self.endpoints.get("native", next(iter(self.endpoints.values()), ""))
