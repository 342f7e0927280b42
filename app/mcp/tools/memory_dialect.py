"""Drop-in tools of the reference `@modelcontextprotocol/server-memory`: same names, fields and shapes.

Deliberate differences (docs/tools.md): a relation to a missing entity is refused instead of
stored dangling; duplicates inside one batch are written once; deletes are soft (restorable with
the native tools); read_graph, search_nodes and open_nodes are bounded and say so.
"""

# No `from __future__ import annotations`: the schemas use bounds known only at registration.
from typing import Annotated

import orjson
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from app.auth.principal import READ, WRITE, Principal
from app.mcp.context import ToolSet
from app.services import Services, models
from app.services.graph import Slice

Text = Annotated[str, StringConstraints(min_length=1, max_length=200)]
Obs = Annotated[str, StringConstraints(min_length=1, max_length=4000)]

# The reference's own annotations.
_WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
_DELETE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)
_READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)


class Entity(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: Text = Field(description="The name of the entity")
    entityType: Text = Field(description="The type of the entity")
    observations: Annotated[list[Obs], Field(max_length=100)] = Field(
        description="An array of observation contents associated with the entity"
    )


class Relation(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    from_: Text = Field(alias="from", description="The name of the entity where the relation starts")
    to: Text = Field(description="The name of the entity where the relation ends")
    relationType: Text = Field(description="The type of the relation")


class ObservationAddition(BaseModel):
    model_config = ConfigDict(extra="forbid")
    entityName: Text = Field(description="The name of the entity to add the observations to")
    contents: Annotated[list[Obs], Field(max_length=100)] = Field(description="An array of observation contents to add")


class ObservationDeletion(BaseModel):
    model_config = ConfigDict(extra="forbid")
    entityName: Text = Field(description="The name of the entity containing the observations")
    observations: Annotated[list[Obs], Field(max_length=100)] = Field(description="An array of observations to delete")


class Entities(BaseModel):
    entities: list[Entity]


class Relations(BaseModel):
    relations: list[Relation]


class Added(BaseModel):
    entityName: str
    addedObservations: list[str]


class AddedResults(BaseModel):
    results: list[Added]


class Done(BaseModel):
    success: bool
    message: str


class KnowledgeGraph(BaseModel):
    entities: list[Entity]
    relations: list[Relation]
    # Engram's bounds: present only when a result was cut.
    nextCursor: str | None = Field(None, description="read_graph: pass back as `cursor` for the next page.")
    note: str | None = None


def _reply(model: BaseModel, text: str | None = None) -> CallToolResult:
    """The reference answers with structured content and the same JSON, pretty-printed, as text."""
    data = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    body = text if text is not None else orjson.dumps(data, option=orjson.OPT_INDENT_2).decode()
    return CallToolResult(content=[TextContent(type="text", text=body)], structured_content=data)


def _entity(e: models.EntitySummary, observations: list[str]) -> Entity:
    return Entity.model_construct(name=e.name, entityType=e.type, observations=observations)


def _relation(r: models.Relation) -> Relation:
    return Relation.model_construct(from_=r.from_, to=r.to, relationType=r.type)


def _graph(graph: Slice, note: str | None = None) -> KnowledgeGraph:
    if graph.truncated and note is None:
        note = "result capped; narrow the query or use the native tools for more"
    return KnowledgeGraph(
        entities=[_entity(x.entity, x.observations) for x in graph.entities],
        relations=[_relation(r) for r in graph.relations],
        nextCursor=graph.next_cursor,
        note=note,
    )


def _fold(entities: list[Entity]) -> list[Entity]:
    """One entry per name (the first), so a batch's duplicates are not written twice."""
    return list({e.name: e for e in reversed(entities)}.values())[::-1]


def register(tool: ToolSet, s: Services) -> None:
    batch = s.limits.max_batch

    @tool(WRITE, _WRITE)
    async def create_entities(who: Principal, entities: Annotated[list[Entity], Field(max_length=batch)]) -> Entities:
        """Create multiple new entities in the knowledge graph"""
        folded = _fold(entities)
        done = await s.entities.upsert(
            who,
            [models.EntityIn(name=e.name, type=e.entityType, observations=e.observations) for e in folded],
            "skip",
        )
        created = {r.name for r in done.results if r.status == "created"}
        return _reply(Entities(entities=[e for e in folded if e.name in created]))  # type: ignore[return-value]

    @tool(WRITE, _WRITE)
    async def create_relations(
        who: Principal, relations: Annotated[list[Relation], Field(max_length=batch)]
    ) -> Relations:
        """Create multiple new relations between entities in the knowledge graph. Relations should be in active voice"""
        if not relations:
            return _reply(Relations(relations=[]))  # type: ignore[return-value]
        done = await s.relations.connect(
            who, [models.RelationIn(from_=r.from_, to=r.to, type=r.relationType) for r in relations], exact=True
        )
        new = [_relation(item.relation) for item in done.results if item.status == "created"]
        return _reply(Relations(relations=new))  # type: ignore[return-value]

    @tool(WRITE, _WRITE)
    async def add_observations(
        who: Principal, observations: Annotated[list[ObservationAddition], Field(max_length=batch)]
    ) -> AddedResults:
        """Add new observations to existing entities in the knowledge graph"""
        changed = await s.entities.change_observations_by_name(
            who, [(o.entityName, o.contents) for o in observations], add=True, missing_ok=False
        )
        results = [
            Added(entityName=o.entityName, addedObservations=c or [])
            for o, c in zip(observations, changed, strict=True)
        ]
        return _reply(AddedResults(results=results))  # type: ignore[return-value]

    @tool(WRITE, _DELETE)
    async def delete_entities(
        who: Principal,
        entityNames: Annotated[list[Text], Field(max_length=batch, description="An array of entity names to delete")],
    ) -> Done:
        """Delete multiple entities and their associated relations from the knowledge graph"""
        await s.entities.delete_by_name(who, entityNames)
        return _reply(Done(success=True, message="Entities deleted successfully"), "Entities deleted successfully")  # type: ignore[return-value]

    @tool(WRITE, _DELETE)
    async def delete_observations(
        who: Principal, deletions: Annotated[list[ObservationDeletion], Field(max_length=batch)]
    ) -> Done:
        """Delete specific observations from entities in the knowledge graph"""
        await s.entities.change_observations_by_name(
            who, [(d.entityName, d.observations) for d in deletions], add=False, missing_ok=True
        )
        return _reply(
            Done(success=True, message="Observations deleted successfully"), "Observations deleted successfully"
        )  # type: ignore[return-value]

    @tool(WRITE, _DELETE)
    async def delete_relations(who: Principal, relations: Annotated[list[Relation], Field(max_length=batch)]) -> Done:
        """Delete multiple relations from the knowledge graph"""
        keys = [models.RelationKey(from_=r.from_, to=r.to, type=r.relationType) for r in relations]
        if keys:
            await s.relations.disconnect(who, keys, [], exact=True)
        return _reply(Done(success=True, message="Relations deleted successfully"), "Relations deleted successfully")  # type: ignore[return-value]

    @tool(READ, _READ)
    async def read_graph(
        who: Principal,
        cursor: Annotated[models.Cursor | None, Field(description="From `nextCursor` of the previous page.")] = None,
    ) -> KnowledgeGraph:
        """Read the entire knowledge graph"""
        page = await s.graph.page(who, cursor)
        note = None
        if page.next_cursor:
            note = (
                f"page of {len(page.entities)} of {page.total_entities} entities (each with its outgoing "
                "relations); call read_graph with cursor=nextCursor for the rest"
            )
        return _reply(_graph(page, note))  # type: ignore[return-value]

    @tool(READ, _READ)
    async def search_nodes(
        who: Principal,
        query: Annotated[
            str,
            StringConstraints(max_length=1000),
            Field(description="The search query to match against entity names, types, and observation content"),
        ],
    ) -> KnowledgeGraph:
        """Search for nodes in the knowledge graph based on a query"""
        return _reply(_graph(await s.graph.matching(who, query)))  # type: ignore[return-value]

    @tool(READ, _READ)
    async def open_nodes(
        who: Principal,
        names: Annotated[list[Text], Field(max_length=batch, description="An array of entity names to retrieve")],
    ) -> KnowledgeGraph:
        """Open specific nodes in the knowledge graph by their names"""
        return _reply(_graph(await s.graph.named(who, names)))  # type: ignore[return-value]
