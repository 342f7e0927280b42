"""The MCP server: instructions and tool registration."""

from __future__ import annotations

from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer

from app.auth.verifier import JwtVerifier
from app.config import Settings
from app.mcp.tools import graph, search
from app.services.memory import Memory
from app.services.search import Search

INSTRUCTIONS = """\
Engram is a persistent knowledge-graph memory shared by everyone in your tenant.
Entities (people, projects, concepts) carry observations (atomic facts); relations link them
with active-voice types ("works at", "depends on").
- Before answering from memory, look things up: search with the question in plain words,
  get_entity for a known name, neighbors to explore.
- Record new facts with upsert_entities (it merges into existing names) and link them with
  connect_entities. Keep each observation to one fact.
"""


def build_mcp(settings: Settings, memory: Memory, verifier: JwtVerifier, searcher: Search) -> MCPServer:
    mcp = MCPServer(
        name="engram",
        title="Engram memory",
        instructions=INSTRUCTIONS,
        version="0.1.0",
        token_verifier=verifier,
        auth=AuthSettings(
            issuer_url=settings.issuer,
            resource_server_url=settings.resource_url,
            required_scopes=[],
            # The verifier checks `aud` against the resource URL itself.
            validate_token_resource=False,
        ),
    )
    graph.register(mcp, memory, settings.tenant_claim)
    search.register(mcp, searcher, settings.tenant_claim)
    return mcp
