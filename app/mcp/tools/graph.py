"""Native tools that walk and summarise the graph."""

# No `from __future__ import annotations`: the schemas use bounds known only at registration.
from typing import Annotated

from pydantic import Field

from app.answers import graph as shown
from app.answers.form import Detail, MaxTokens
from app.auth.principal import READ, Principal
from app.mcp.toolset import READ_ONLY, ToolSet
from app.services import Services, models
from app.services.filters import moment

WALK_TOKENS = 2000  # a walk's default room: a few dozen entities with their relations
RelationTypes = Annotated[list[models.TypeName] | None, Field(max_length=20, description="Exact relation types.")]


def register(tool: ToolSet, services: Services) -> None:
    cap = services.limits.max_results

    @tool(READ, READ_ONLY, title="Neighbours", answer=shown.NEIGHBORS)
    async def neighbors(
        who: Principal,
        entity: Annotated[models.Ref, Field(description="Id or name.")],
        depth: Annotated[int, Field(ge=1, le=5)] = 2,
        direction: models.Direction = "both",
        relation_types: RelationTypes = None,
        limit: Annotated[int, Field(ge=1, le=cap)] = 50,
        as_of: models.AsOf = None,
        include_invalid: models.IncludeInvalid = False,
        max_tokens: MaxTokens = WALK_TOKENS,
        detail: Detail = "concise",
    ) -> models.NeighborsResult:
        """Entities within `depth` relations of one, each once at its shortest distance with the relation
        that reached it (`via`).
        """
        return await services.graph.neighbors(
            who,
            entity,
            depth=depth,
            direction=direction,
            types=relation_types,
            limit=limit,
            when=moment(as_of, include_invalid),
            budget=shown.NEIGHBORS.budget(max_tokens, detail),
        )

    @tool(READ, READ_ONLY, title="Shortest path", answer=shown.path)
    async def shortest_path(
        who: Principal,
        from_: Annotated[models.Ref, Field(alias="from", description="Id or name.")],
        to: Annotated[models.Ref, Field(description="Id or name.")],
        max_depth: Annotated[int, Field(ge=1, le=10)] = 5,
        direction: models.Direction = "both",
        relation_types: RelationTypes = None,
        as_of: models.AsOf = None,
        include_invalid: models.IncludeInvalid = False,
        detail: Detail = "concise",
    ) -> models.PathResult:
        """How two entities connect: a shortest chain of relations."""
        return await services.graph.path(
            who,
            from_,
            to,
            max_depth=max_depth,
            direction=direction,
            types=relation_types,
            when=moment(as_of, include_invalid),
        )

    @tool(READ, READ_ONLY, title="Relation chain", answer=shown.CHAIN)
    async def relation_chain(
        who: Principal,
        entity: Annotated[models.Ref, Field(description="Id or name.")],
        relation_type: models.TypeName,
        direction: models.Direction = "out",
        depth: Annotated[int, Field(ge=1, le=10)] = 5,
        as_of: models.AsOf = None,
        include_invalid: models.IncludeInvalid = False,
        detail: Detail = "concise",
    ) -> models.NeighborsResult:
        """Follow one relation type transitively (e.g. every prerequisite), nearest first."""
        return await services.graph.chain(
            who,
            entity,
            relation_type=relation_type,
            direction=direction,
            depth=depth,
            when=moment(as_of, include_invalid),
        )

    @tool(READ, READ_ONLY, title="Subgraph", answer=shown.SUBGRAPH)
    async def subgraph(
        who: Principal,
        entities: Annotated[list[models.Ref], Field(min_length=1, max_length=20, description="Ids or names.")],
        depth: Annotated[int, Field(ge=1, le=3)] = 1,
        max_nodes: Annotated[int, Field(ge=1, le=500)] = 100,
        max_relations: Annotated[int, Field(ge=1, le=2000)] = 300,
        as_of: models.AsOf = None,
        include_invalid: models.IncludeInvalid = False,
        max_tokens: MaxTokens = WALK_TOKENS,
        detail: Detail = "concise",
    ) -> models.SubgraphResult:
        """Context in one call: the given entities, all within `depth` relations of them, and the
        relations among them.
        """
        return await services.graph.subgraph(
            who,
            entities,
            depth=depth,
            max_nodes=max_nodes,
            max_relations=max_relations,
            when=moment(as_of, include_invalid),
            budget=shown.SUBGRAPH.budget(max_tokens, detail),
        )

    @tool(READ, READ_ONLY, title="Category tree", answer=shown.hierarchy)
    async def hierarchy(who: Principal, detail: Detail = "concise") -> models.HierarchyResult:
        """The area → topic → subtopic tree with entity counts."""
        return await services.graph.hierarchy(who)

    @tool(READ, READ_ONLY, title="Graph statistics", answer=shown.stats)
    async def graph_stats(who: Principal, detail: Detail = "concise") -> models.StatsResult:
        """Counts, top types, most connected entities, latest changes."""
        return await services.graph.stats(who)

    @tool(READ, READ_ONLY, answers_offline=True, title="Server status", answer=shown.status)
    async def server_status(who: Principal, detail: Detail = "concise") -> models.StatusResult:
        """Whether the memory works now, and which tools are usable."""
        return await services.status.check(who, list(tool.scopes))
