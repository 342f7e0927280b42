"""The MCP servers: one per tool set chosen by settings (ENGRAM_TOOL_SETS), each with its own
instructions naming only its tools. The native and memory endpoints also serve the graph resources,
the native one the prompt."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from urllib.parse import quote

from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer

from app.auth.verifier import EndpointVerifier, TokenVerifier
from app.config import ENDPOINT_PATHS, Settings
from app.mcp import resources
from app.mcp.listing import Listing
from app.mcp.live import ListenGuard, TenantBus
from app.mcp.observe import Observe
from app.mcp.tools import (
    admin,
    chatgpt,
    entities,
    graph,
    graph_query,
    memory_dialect,
    merges,
    neo4j_dialect,
    pins,
    purge,
    recall,
    relations,
    search,
)
from app.mcp.toolset import ToolSet
from app.observability.usage import Usage
from app.services import Services
from app.services.live import Live
from app.services.models import EntitySummary
from app.version import VERSION

ABOUT = """\
Engram is a persistent knowledge-graph memory for everyone in your tenant.
Entities (people, projects, concepts) carry observations (atomic facts); relations link them
with active-voice types ("works at", "depends on").
"""
# How to use each tool set; each endpoint's instructions name only the tools it serves.
USAGE = {
    "native": """\
- Before answering from memory, look it up: recall with the question in plain words gives the
  facts that answer it, one by one (observations, relations, episodes); search finds entities;
  get_entity for a known name, find_entities to list by filters, neighbors / shortest_path /
  subgraph to explore connections.
- Record new facts with upsert_entities (it merges into existing names) and link entities with
  connect_entities. Keep each observation to one fact. Keep raw messages, notes or document chunks
  with add_episodes (with when they happened and who spoke). When a fact stops being true, end it with
  invalidate_observations / invalidate_relations (reads can still see it with `as_of`); fix
  mistakes with update_entity and remove_observations; remove_entities is undone by
  restore_entities.
- pin_facts keeps key facts (at most 50) at the head of every session's brief and of recall.
- Private and shared: entities, observations and relations are shared with your whole tenant. An
  episode is shared too unless you add it with `private: true`: then only you ever see it (no one
  else, administrators included), and recall, list_episodes and the session briefs mark it
  `private`. Turns your assistant's hooks keep are private to you unless your tenant shares them.
  Keep personal notes, drafts and anything said to you alone private; what the team should know,
  shared.
- Duplicates: find_duplicates proposes pairs; merge_entities folds one into another, keeping its
  name as an alias; add_aliases records other names an entity answers to.
- Answers are short lines: an entity by its name (which every tool takes as a handle), an episode
  by `#id`. `detail="full"` gives the complete record as JSON; `max_tokens` bounds an answer's
  size (what does not fit is counted, with a cursor). Lists are paged: pass the `cursor` back.
  Of an argument's listed values, the first is its default.
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
    "chatgpt": """\
- search finds entities by meaning and words; fetch reads one, by the id search gave, as a document:
  its facts and relations, with a link to its page.
""",
}


def instructions(tool_set: str, neo4j_prefix: str = "") -> str:
    return ABOUT + USAGE[tool_set].format(p=neo4j_prefix)


@dataclass(frozen=True)
class Endpoint:
    """One tool set's MCP server, served at `path` (`url`), taking the tokens its `verifier` accepts."""

    tool_set: str
    path: str
    url: str
    mcp: MCPServer
    verifier: EndpointVerifier
    scopes: Mapping[str, str]  # tool name -> the scope it needs
    live: Live | None = None  # where the graph resources can be followed


def build_endpoints(settings: Settings, services: Services, verifier: TokenVerifier, usage: Usage) -> list[Endpoint]:
    """One MCPServer per served tool set, all sharing the services (and so the pool, fairness and
    deadlines), the verifier's cache and the usage counts."""
    return [_endpoint(name, settings, services, verifier, usage) for name in settings.endpoint_urls]


def _endpoint(name: str, settings: Settings, services: Services, verifier: TokenVerifier, usage: Usage) -> Endpoint:
    claims = [settings.tenant_claim, *settings.tenant_fallback_claims]
    neo4j_prefix = neo4j_dialect.tool_prefix(settings.neo4j_namespace) if name == "neo4j" else ""
    # Engram's own sets are listed compact (docs/tools.md, "What tools/list costs"); the dialects as
    # their reference servers list their tools.
    compact = name not in _DIALECTS
    tools = ToolSet(
        claims,
        neo4j_prefix,
        fairness=services.fairness,
        deadline=settings.call_deadline,
        compact=compact,
        output_schemas=settings.tool_output_schemas or not compact,
        disabled=settings.disabled_in(name),
    )
    for module in _MODULES[name]:
        module.register(tools, services)
    if name == "chatgpt":
        chatgpt.register(tools, services, _entity_page(settings))
    if unknown := sorted(tools.disabled - tools.skipped):
        raise ValueError(f"ENGRAM_DISABLED_TOOLS: the {name} tool set has no tool {', '.join(unknown)}")
    # Metric and usage labels: the tool's name, and on the neo4j and chatgpt endpoints the set's name
    # and its original name (their names overlap others'; a namespace does not multiply the labels).
    labels = {t: f"{name}/{t.removeprefix(neo4j_prefix)}" if name in ("neo4j", "chatgpt") else t for t in tools.scopes}
    url = settings.endpoint_url(name)
    audience = EndpointVerifier(verifier, settings.audiences_for(name))
    # The graph resources can be followed (subscriptions/listen) where they are served.
    live = services.live if name in _RESOURCES else None
    guard = ListenGuard(live, claims) if live is not None else None
    mcp = MCPServer(
        name="engram",
        title="Engram memory",
        instructions=instructions(name, neo4j_prefix),
        version=VERSION,
        token_verifier=audience,
        auth=AuthSettings(
            issuer_url=settings.issuer,
            resource_server_url=url,
            required_scopes=[],
            # EndpointVerifier checks `aud` itself (ENGRAM_OIDC_AUDIENCES may name another audience).
            validate_token_resource=False,
        ),
        tools=tools.tools,
        middleware=[
            Observe(labels, usage, settings.metrics_tenants),
            *([guard] if guard is not None else []),
            Listing(tools.listed, tools.scopes),
        ],
        subscriptions=TenantBus() if live is not None else False,
    )
    if guard is not None:
        guard.serve_subscribe(mcp)
    if name in _RESOURCES:  # the graph resources, as server-memory has them; the prompt names native tools
        resources.register(mcp, services, claims, settings.call_deadline, prompt=name == "native")
    return Endpoint(name, ENDPOINT_PATHS[name], url, mcp, audience, tools.scopes, live)


_MODULES: dict[str, tuple[ModuleType, ...]] = {
    "native": (entities, relations, pins, graph, search, recall, admin, merges, graph_query, purge),
    "memory": (memory_dialect,),
    "neo4j": (neo4j_dialect,),
    "chatgpt": (),  # registered with the entity pages' address
}
_DIALECTS = ("memory", "neo4j")  # listed as their reference servers list their tools
_RESOURCES = ("native", "memory")  # the endpoints that serve (and follow) the graph resources


def _entity_page(settings: Settings) -> Callable[[EntitySummary], str]:
    """An entity's page: the console's, where it is served; else the MCP resource that reads it."""
    if settings.console_served:
        return lambda entity: f"{settings.base_url}/console/entity/{entity.id}"
    return lambda entity: f"memory://entities/{quote(entity.name, safe='')}"
