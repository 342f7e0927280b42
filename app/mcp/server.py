"""The MCP server: instructions, the tool sets chosen by settings, resources and the prompt."""

from __future__ import annotations

from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer

from app.auth.verifier import TokenVerifier
from app.config import Settings
from app.mcp import resources
from app.mcp.observe import Observe
from app.mcp.tools import admin, entities, graph, memory_dialect, neo4j_dialect, relations, search
from app.mcp.toolset import ToolSet
from app.observability.usage import Usage
from app.services import Services
from app.version import VERSION

ABOUT = """\
Engram is a persistent knowledge-graph memory shared by everyone in your tenant.
Entities (people, projects, concepts) carry observations (atomic facts); relations link them
with active-voice types ("works at", "depends on").
"""
# How to use each tool set; the server's instructions name only the tools it serves.
USAGE = {
    "native": """\
- Before answering from memory, look it up: search with the question in plain words, get_entity
  for a known name, find_entities to list by filters, neighbors / shortest_path / subgraph to
  explore connections.
- Record new facts with upsert_entities (it merges into existing names) and link entities with
  connect_entities. Keep each observation to one fact. When a fact stops being true, end it with
  invalidate_observations / invalidate_relations (reads can still see it with `as_of`); fix
  mistakes with update_entity and remove_observations; remove_entities is undone by
  restore_entities.
- Lists are paged: pass `next_cursor` back as `cursor`.
""",
    "memory": """\
- Look things up with search_nodes (text in names, types, observations) or open_nodes (exact
  names); record facts with create_entities (existing names are skipped), add_observations and
  create_relations. read_graph comes in pages: pass `nextCursor` back as `cursor`.
""",
    "neo4j": """\
- Look things up with {p}search_memories (text in names, types, observations) or
  {p}find_memories_by_name (exact names); record facts with {p}create_entities (an existing name
  takes the given type and observations), {p}add_observations and {p}create_relations.
  {p}read_graph comes in pages: pass `nextCursor` back as `cursor`.
""",
}


def instructions(tool_sets: list[str], neo4j_prefix: str) -> str:
    return ABOUT + "".join(USAGE[name].format(p=neo4j_prefix) for name in USAGE if name in tool_sets)


def build_mcp(
    settings: Settings, services: Services, verifier: TokenVerifier, usage: Usage
) -> tuple[MCPServer, ToolSet]:
    neo4j_prefix = neo4j_dialect.tool_prefix(settings.neo4j_namespace)
    claims = [settings.tenant_claim, *settings.tenant_fallback_claims]
    tools = ToolSet(claims, fairness=services.fairness, deadline=settings.call_deadline)
    if "native" in settings.tool_sets:
        for module in (entities, relations, graph, search, admin):
            module.register(tools, services)
    if "memory" in settings.tool_sets:
        memory_dialect.register(tools, services)
    if "neo4j" in settings.tool_sets:
        dialect = ToolSet(claims, neo4j_prefix, tools.scopes, tools.tools, services.fairness, settings.call_deadline)
        neo4j_dialect.register(dialect, services)
    mcp = MCPServer(
        name="engram",
        title="Engram memory",
        instructions=instructions(settings.tool_sets, neo4j_prefix),
        version=VERSION,
        token_verifier=verifier,
        auth=AuthSettings(
            issuer_url=settings.issuer,
            resource_server_url=settings.resource_url,
            required_scopes=[],
            # The verifier checks `aud` against the resource URL itself.
            validate_token_resource=False,
        ),
        tools=tools.tools,
        middleware=[Observe(tools.scopes, usage, settings.metrics_tenants)],
    )
    resources.register(mcp, services, claims, settings.call_deadline)
    return mcp, tools
