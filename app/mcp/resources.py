"""MCP resources (the graph and single entities, as JSON) and the prompt on using the memory well."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import orjson
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, GetPromptRequestParams, GetPromptResult, InputRequiredResult

from app.auth.principal import READ
from app.errors import EngramError
from app.mcp.tools import memory_dialect
from app.mcp.toolset import caller, warn_unavailable
from app.services import Services
from app.services.calls import within

GUIDE = """\
You have a long-term memory (Engram), shared with your team. Use it like this:
1. Before answering anything about people, projects, decisions or preferences you may have met
   before, look them up: recall with the question in plain words returns the facts that answer it,
   best first, each with its entity, source and time (use those times for "when" questions);
   get_entity for a name you know (observations_first "relevant" with a query for one with many
   facts); search or find_entities to find entities; neighbors to see what is connected.
2. When the user tells you something worth keeping, record it: upsert_entities with one entity per
   person/project/concept and one short, self-contained fact per observation ("Prefers morning
   meetings", not "likes them"), with `valid_from` when you know when it became true. Link
   entities with connect_entities using active-voice relation types ("works at", "depends on",
   "reports to"). Keep what is not one fact about one entity (a message, a meeting note, a
   document chunk) as an episode with add_episodes: its time (`at`), its source and its speakers;
   the entities it names are linked to it.
3. Keep the memory correct: when a fact stops being true, end it with invalidate_observations or
   invalidate_relations (with a reason) and add the new one; remove_observations only facts that
   were never true; rename or retype with update_entity. Never store secrets or credentials.
4. Say when an answer comes from memory, and how sure it is (entities carry a certainty 0-100).
"""


T = TypeVar("T")


async def _read(uri: str, deadline: float, run: Callable[[], Awaitable[T]]) -> T:
    """A resource read within the call deadline; domain errors and outages as the tools word them."""
    try:
        return await within(deadline, run)
    except EngramError as exc:
        if exc.code == "unavailable":
            warn_unavailable(f"resource {uri}", None, exc)
        raise ResourceError(str(exc)) from exc


def register(mcp: MCPServer, services: Services, claims: Sequence[str], deadline: float, *, prompt: bool) -> None:
    """The resources; and the prompt, which names the native tools, when `prompt`."""

    @mcp.resource(
        "memory://knowledge-graph",
        name="knowledge-graph",
        description="The knowledge graph (first page) as read_graph shows it: entities with observations, relations",
        mime_type="application/json",
    )
    async def knowledge_graph() -> str:
        page = await _read(
            "memory://knowledge-graph", deadline, lambda: services.graph.page(caller(claims, READ), None)
        )
        return memory_dialect.graph_text(page)

    @mcp.resource(
        "memory://entities/{name}",
        name="entity",
        description="One entity by name, with its observations and relations",
        mime_type="application/json",
    )
    async def entity(name: str) -> str:
        found = await _read(
            "memory://entities/{name}", deadline, lambda: services.entities.get(caller(claims, READ), name)
        )
        return orjson.dumps(found.model_dump(mode="json", by_alias=True)).decode()

    if not prompt:
        return

    @mcp.prompt(name="use_memory", title="Use Engram memory well", description="How to read and write the memory")
    def use_memory() -> str:
        return GUIDE

    serve_prompt_checked(mcp)


def serve_prompt_checked(mcp: MCPServer) -> None:
    """prompts/get, its name and arguments checked first: an unknown prompt or an argument it does
    not take is the caller's mistake (INVALID_PARAMS), not an error of the server to log with its
    traceback. The prompts take no arguments."""
    handle = mcp._handle_get_prompt

    async def get_prompt(
        ctx: ServerRequestContext[Any, Any], params: GetPromptRequestParams
    ) -> GetPromptResult | InputRequiredResult:
        if params.name not in {p.name for p in await mcp.list_prompts()}:
            raise MCPError(INVALID_PARAMS, "invalid: name: no such prompt")
        if params.arguments:
            raise MCPError(INVALID_PARAMS, "invalid: arguments: this prompt takes none")
        return await handle(ctx, params)

    mcp._lowlevel_server.add_request_handler("prompts/get", GetPromptRequestParams, get_prompt)
