"""Native tools over entities, relations and walks. Each one: check the caller, call one service."""

# No `from __future__ import annotations`: the schemas use bounds known only at registration.

from typing import Annotated, Literal

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations
from pydantic import Field

from app.auth.principal import READ, WRITE
from app.errors import EngramError
from app.mcp.context import caller, tool_errors
from app.services.memory import Memory
from app.services.models import (
    ConnectResult,
    Direction,
    Entity,
    EntityIn,
    NeighborsResult,
    Ref,
    RelationIn,
    TypeName,
    UpsertResult,
)

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
ADDITIVE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)


def register(mcp: MCPServer, memory: Memory, tenant_claim: str) -> None:
    batch = memory.max_batch

    @mcp.tool(annotations=ADDITIVE)
    @tool_errors
    async def upsert_entities(
        entities: Annotated[list[EntityIn], Field(min_length=1, max_length=batch)],
        on_existing: Literal["merge", "skip", "error"] = "merge",
    ) -> UpsertResult:
        """Create entities, or merge into existing ones with the same exact name.

        Use it to record people, projects, concepts and the facts (observations) about them.
        `merge` (default) sets the fields given and appends new observations; `skip` leaves
        existing entities alone; `error` fails the whole call if any name exists. The batch is one
        transaction. Returns, per entity, whether it was created, updated, unchanged or skipped.
        """
        who = caller(tenant_claim, WRITE)
        return await memory.upsert_entities(who, entities, on_existing)

    @mcp.tool(annotations=READ_ONLY)
    @tool_errors
    async def get_entity(
        id: Annotated[str | None, Field(max_length=200, description="The entity's id.")] = None,
        name: Annotated[str | None, Field(max_length=200, description="The entity's name.")] = None,
        include_relations: bool = True,
        max_observations: Annotated[int, Field(ge=0, le=1000)] = 100,
    ) -> Entity:
        """Read one entity by id or by name, with its observations and its direct relations.

        A name is matched exactly, then case-insensitively; a name that matches several entities
        case-insensitively is an `ambiguous` error listing the candidates. Observations beyond
        `max_observations` are counted in `observations_total` but not listed.
        """
        who = caller(tenant_claim, READ)
        ref = _one_ref(id, name)
        return await memory.get_entity(
            who,
            ref,
            include_relations=include_relations,
            max_observations=max_observations,
            max_relations=memory.max_results,
        )

    @mcp.tool(annotations=ADDITIVE)
    @tool_errors
    async def connect_entities(
        relations: Annotated[list[RelationIn], Field(min_length=1, max_length=batch)],
    ) -> ConnectResult:
        """Create directed relations between existing entities, e.g. Ada --works at--> Acme.

        Ends are given by id or name and must exist. An exact duplicate (same from, type, to) is
        reported as `exists` and not created twice. The batch is one transaction.
        """
        who = caller(tenant_claim, WRITE)
        return await memory.connect_entities(who, relations)

    @mcp.tool(annotations=READ_ONLY)
    @tool_errors
    async def neighbors(
        entity: Annotated[Ref, Field(description="Start entity: id or name.")],
        depth: Annotated[int, Field(ge=1, le=3)] = 2,
        direction: Direction = "both",
        relation_types: Annotated[list[TypeName] | None, Field(max_length=20)] = None,
        limit: Annotated[int, Field(ge=1, le=memory.max_results)] = 50,
    ) -> NeighborsResult:
        """Explore the graph around an entity, breadth first, up to `depth` relations away.

        Each neighbour appears once, at its shortest distance, with the relation that reached it.
        Filter by `direction` (out, in, both) and by exact `relation_types`.
        """
        who = caller(tenant_claim, READ)
        return await memory.neighbors(
            who, entity, depth=depth, direction=direction, relation_types=relation_types, limit=limit
        )


def _one_ref(id: str | None, name: str | None) -> str:
    if (id is None) == (name is None):
        raise EngramError("invalid", "give exactly one of `id` or `name`")
    return (id or name or "").strip()
