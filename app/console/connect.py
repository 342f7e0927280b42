"""The Connect page: how a person connects an assistant to this tenant's memory. The MCP URLs of
every served tool set, settings for the assistants people use (app/console/client_setups.py makes
them; a copy button each, and one-click install links), and (for the tenant's administrators) a
form that makes an API key for a headless agent, through the administration page's own action
(app/console/admin.py). Nothing here chooses a tenant: the URLs are the server's,
the tenant is the one each client's sign-in (or key) is for."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from app.auth.principal import READ, WRITE
from app.console.client_setups import agent_setups, setups
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
