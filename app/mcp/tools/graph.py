"""Native tools that walk and summarise the graph."""

# No `from __future__ import annotations`: the schemas use bounds known only at registration.
from typing import Annotated

from pydantic import Field

from app.auth.principal import READ, Principal
from app.mcp.toolset import READ_ONLY, ToolSet
from app.services import Services, models
from app.services.filters import moment

RelationTypes = Annotated[list[models.TypeName] | None, Field(max_length=20, description="Exact relation types.")]


def register(tool: ToolSet, services: Services) -> None:
    cap = services.limits.max_results

    @tool(READ, READ_ONLY)
    async def neighbors(
        who: Principal,
        entity: Annotated[models.Ref, Field(description="Start entity: id or name.")],
        depth: Annotated[int, Field(ge=1, le=5)] = 2,
        direction: models.Direction = "both",
        relation_types: RelationTypes = None,
        limit: Annotated[int, Field(ge=1, le=cap)] = 50,
        as_of: models.AsOf = None,
        include_invalid: models.IncludeInvalid = False,
    ) -> models.NeighborsResult:
        """Explore the graph around an entity, breadth first, up to `depth` relations away.

        Each neighbour appears once, at its shortest distance, with the relation that first reached
        it (`via`, in its real direction). Filter by `direction` (out, in, both) and exact
        `relation_types`. `truncated` is true when `limit`, or a bound on one level's size (a hub
        with thousands of relations), cut the walk short. Only relations valid now are walked,
        unless `as_of` (valid at that time) or `include_invalid` (every relation) says otherwise.
        """
        return await services.graph.neighbors(
            who,
            entity,
            depth=depth,
            direction=direction,
            types=relation_types,
            limit=limit,
            when=moment(as_of, include_invalid),
        )

    @tool(READ, READ_ONLY)
    async def shortest_path(
        who: Principal,
        from_: Annotated[models.Ref, Field(alias="from", description="Start entity: id or name.")],
        to: Annotated[models.Ref, Field(description="End entity: id or name.")],
        max_depth: Annotated[int, Field(ge=1, le=10)] = 5,
        direction: models.Direction = "both",
        relation_types: RelationTypes = None,
        as_of: models.AsOf = None,
        include_invalid: models.IncludeInvalid = False,
    ) -> models.PathResult:
        """How two entities connect: a shortest chain of relations between them, up to `max_depth` long.

        Returns the nodes from start to end and the relations between them (`relations[i]` joins
        `nodes[i]` and `nodes[i+1]`, each in its real direction). No path is a normal answer
        (`found: false`), not an error. `truncated` says a bound on the search's size cut it (a hub
        on the way): narrow it with `relation_types` or `direction`. Only relations valid now count,
        unless `as_of` (valid at that time) or `include_invalid` (every relation) says otherwise.
        """
        return await services.graph.path(
            who,
            from_,
            to,
            max_depth=max_depth,
            direction=direction,
            types=relation_types,
            when=moment(as_of, include_invalid),
        )

    @tool(READ, READ_ONLY)
    async def relation_chain(
        who: Principal,
        entity: Annotated[models.Ref, Field(description="Start entity: id or name.")],
        relation_type: models.TypeName,
        direction: models.Direction = "out",
        depth: Annotated[int, Field(ge=1, le=10)] = 5,
        as_of: models.AsOf = None,
        include_invalid: models.IncludeInvalid = False,
    ) -> models.NeighborsResult:
        """Follow one kind of relation transitively, e.g. every prerequisite of a course, or every
        part a component belongs to. Results are ordered by distance. Relations valid now, at
        `as_of`, or all of them (`include_invalid`).
        """
        return await services.graph.chain(
            who,
            entity,
            relation_type=relation_type,
            direction=direction,
            depth=depth,
            when=moment(as_of, include_invalid),
        )

    @tool(READ, READ_ONLY)
    async def subgraph(
        who: Principal,
        entities: Annotated[list[models.Ref], Field(min_length=1, max_length=20, description="Ids or names.")],
        depth: Annotated[int, Field(ge=1, le=3)] = 1,
        max_nodes: Annotated[int, Field(ge=1, le=500)] = 100,
        max_relations: Annotated[int, Field(ge=1, le=2000)] = 300,
        as_of: models.AsOf = None,
        include_invalid: models.IncludeInvalid = False,
    ) -> models.SubgraphResult:
        """A bounded bundle of context in one call: the given entities, everything within `depth`
        relations of them, and the relations among all of those. Relations valid now, at `as_of`,
        or all of them (`include_invalid`, each with its interval).
        """
        return await services.graph.subgraph(
            who,
            entities,
            depth=depth,
            max_nodes=max_nodes,
            max_relations=max_relations,
            when=moment(as_of, include_invalid),
        )

    @tool(READ, READ_ONLY)
    async def hierarchy(who: Principal) -> models.HierarchyResult:
        """The area → topic → subtopic tree of the memory with entity counts. Entities without an
        area (or topic, subtopic) are grouped under `name: null` at that level. A large tree is cut
        to its first children per node (`truncated: true`; counts stay exact): list one area or
        topic with find_entities.
        """
        return await services.graph.hierarchy(who)

    @tool(READ, READ_ONLY)
    async def graph_stats(who: Principal) -> models.StatsResult:
        """An overview of the memory: counts of entities, relations and observations, the commonest
        entity and relation types, the most connected entities, and the latest changes.
        """
        return await services.graph.stats(who)

    @tool(READ, READ_ONLY, answers_offline=True)
    async def server_status(who: Principal) -> models.StatusResult:
        """Whether the memory works right now: the database, this tenant's graph, the embedding
        provider, and which tools are usable. Answers even when the database is down.
        """
        return await services.status.check(who, list(tool.scopes))
