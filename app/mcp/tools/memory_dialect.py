"""Drop-in tools of the reference `@modelcontextprotocol/server-memory`: same names, fields and shapes.

Deliberate differences (docs/tools.md): a relation to a missing entity is refused instead of
stored dangling; duplicates inside one batch are written once; deletes are soft (restorable with
the native tools); read_graph, search_nodes and open_nodes are bounded and say so.
"""

# No `from __future__ import annotations`: the schemas use bounds known only at registration.
from typing import Annotated, Any

import orjson
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field

from app.auth.principal import READ, WRITE, Principal
from app.mcp.tools import slices
from app.mcp.toolset import ToolSet
from app.services import Services, models
from app.services.graph import Slice

# The reference's own annotations.
_WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
_DELETE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)
_READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
# Names, types and facts exactly as the reference keeps them (models.ExactName: nothing trimmed,
# longer bounds); an empty fact is accepted and left out.
Observations = Annotated[list[models.ExactObservation], Field(max_length=100)]


# Outputs carry no input bounds: whatever the graph holds (written by any tool set) can be returned.
class Entity(BaseModel):
    name: str
    entityType: str
    observations: list[str]


class Relation(BaseModel):
    model_config = ConfigDict(populate_by_name=True)
    from_: str = Field(alias="from")
    to: str
    relationType: str


class EntityIn(Entity):
    model_config = ConfigDict(extra="forbid")
    name: models.ExactName = Field(description="The name of the entity")
    entityType: models.ExactType = Field(description="The type of the entity")
    observations: Observations = Field(description="An array of observation contents associated with the entity")


class RelationIn(Relation):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    from_: models.ExactName = Field(alias="from", description="The name of the entity where the relation starts")
    to: models.ExactName = Field(description="The name of the entity where the relation ends")
    relationType: models.ExactType = Field(description="The type of the relation")


class ObservationAddition(BaseModel):
    model_config = ConfigDict(extra="forbid")
    entityName: models.ExactName = Field(description="The name of the entity to add the observations to")
    contents: Observations = Field(description="An array of observation contents to add")


class ObservationDeletion(BaseModel):
    model_config = ConfigDict(extra="forbid")
    entityName: models.ExactName = Field(description="The name of the entity containing the observations")
    observations: Observations = Field(description="An array of observations to delete")


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
    truncated: bool | None = Field(None, description="Present (true) when a bound cut this answer; `note` says how.")


# Answers are built as the JSON they are sent as (the SDK validates them once against the output
# model): no model is built and dumped again on the way.
def _reply(data: dict[str, Any], shown: str | None = None) -> CallToolResult:
    """Structured content, and as text what the reference prints: the `shown` field's JSON (or all of it), indented."""
    return CallToolResult(content=[TextContent(type="text", text=_text(data, shown))], structured_content=data)


def _text(data: dict[str, Any], shown: str | None = None) -> str:
    return orjson.dumps(data[shown] if shown else data, option=orjson.OPT_INDENT_2).decode()


def graph_text(graph: Slice) -> str:
    """A slice as the reference's `memory://knowledge-graph` resource shows the graph: read_graph's answer."""
    return _text(_graph(graph, "read_graph"))


def _done(message: str) -> CallToolResult:
    """The delete tools' answer: the message as text, and `{success, message}`."""
    return CallToolResult(
        content=[TextContent(type="text", text=message)], structured_content={"success": True, "message": message}
    )


def _entity(name: str, entity_type: str, observations: list[str]) -> dict[str, Any]:
    return {"name": name, "entityType": entity_type, "observations": observations}


def _relation(r: models.Relation) -> dict[str, str]:
    return {"from": r.from_, "to": r.to, "relationType": r.type}


def _graph(graph: Slice, read_graph: str) -> dict[str, Any]:
    """KnowledgeGraph as JSON: Engram's bounds (nextCursor, note, truncated) only when they apply."""
    data: dict[str, Any] = {
        "entities": [_entity(x.entity.name, x.entity.type, list(x.observations)) for x in graph.entities],
        "relations": [_relation(r) for r in graph.relations],
    }
    bounds = (
        ("nextCursor", graph.next_cursor),
        ("note", slices.note(graph, read_graph)),
        ("truncated", slices.truncated(graph)),
    )
    data.update((key, value) for key, value in bounds if value is not None)
    return data


def _fold(entities: list[EntityIn]) -> list[Entity]:
    """The first entry of each name, its observations without repeats or empty ones: what a batch stores."""
    first: dict[str, Entity] = {}
    for e in entities:
        kept = [o for o in dict.fromkeys(e.observations) if o]
        first.setdefault(e.name, Entity(name=e.name, entityType=e.entityType, observations=kept))
    return list(first.values())


# The native models trim names; these were checked as the reference takes them (above) and are
# built without a second check, so that " Ada" stays " Ada".
def _native_entity(e: Entity) -> models.EntityIn:
    return models.EntityIn.model_construct(name=e.name, type=e.entityType, observations=e.observations)


def _native_relation(r: RelationIn) -> models.RelationIn:
    return models.RelationIn.model_construct(from_=r.from_, to=r.to, type=r.relationType)


def _native_key(r: RelationIn) -> models.RelationKey:
    return models.RelationKey.model_construct(from_=r.from_, to=r.to, type=r.relationType)


def register(tool: ToolSet, services: Services) -> None:
    batch = services.limits.max_batch
    read_graph_name = tool.prefix + "read_graph"

    @tool(WRITE, _WRITE, title="Create Entities")
    async def create_entities(
        who: Principal, entities: Annotated[list[EntityIn], Field(max_length=batch)]
    ) -> Annotated[CallToolResult, Entities]:
        """Create multiple new entities in the knowledge graph"""
        folded = _fold(entities)
        done = await services.entities.upsert(who, [_native_entity(e) for e in folded], "skip")
        created = {r.name for r in done.results if r.status == "created"}
        return _reply(
            {"entities": [_entity(e.name, e.entityType, e.observations) for e in folded if e.name in created]},
            "entities",
        )

    @tool(WRITE, _WRITE, title="Create Relations")
    async def create_relations(
        who: Principal, relations: Annotated[list[RelationIn], Field(max_length=batch)]
    ) -> Annotated[CallToolResult, Relations]:
        """Create multiple new relations between entities in the knowledge graph. Relations should be in active voice"""
        new: list[dict[str, str]] = []
        if relations:
            done = await services.relations.connect(who, [_native_relation(r) for r in relations], exact=True)
            new = [_relation(item.relation) for item in done.results if item.status == "created"]
        return _reply({"relations": new}, "relations")

    @tool(WRITE, _WRITE, title="Add Observations")
    async def add_observations(
        who: Principal, observations: Annotated[list[ObservationAddition], Field(max_length=batch)]
    ) -> Annotated[CallToolResult, AddedResults]:
        """Add new observations to existing entities in the knowledge graph"""
        changed = await services.entities.change_observations_by_name(
            who, [(o.entityName, [t for t in o.contents if t]) for o in observations], add=True, missing_ok=False
        )
        pairs = zip(observations, changed, strict=True)
        results = [{"entityName": o.entityName, "addedObservations": c or []} for o, c in pairs]
        return _reply({"results": results}, "results")

    @tool(WRITE, _DELETE, title="Delete Entities")
    async def delete_entities(
        who: Principal,
        entityNames: Annotated[
            list[models.ExactName], Field(max_length=batch, description="An array of entity names to delete")
        ],
    ) -> Annotated[CallToolResult, Done]:
        """Delete multiple entities and their associated relations from the knowledge graph"""
        await services.entities.delete_by_name(who, entityNames)
        return _done("Entities deleted successfully")

    @tool(WRITE, _DELETE, title="Delete Observations")
    async def delete_observations(
        who: Principal, deletions: Annotated[list[ObservationDeletion], Field(max_length=batch)]
    ) -> Annotated[CallToolResult, Done]:
        """Delete specific observations from entities in the knowledge graph"""
        await services.entities.change_observations_by_name(
            who, [(d.entityName, d.observations) for d in deletions], add=False, missing_ok=True
        )
        return _done("Observations deleted successfully")

    @tool(WRITE, _DELETE, title="Delete Relations")
    async def delete_relations(
        who: Principal,
        relations: Annotated[list[RelationIn], Field(max_length=batch, description="An array of relations to delete")],
    ) -> Annotated[CallToolResult, Done]:
        """Delete multiple relations from the knowledge graph"""
        keys = [_native_key(r) for r in relations]
        if keys:
            await services.relations.disconnect(who, keys, [], exact=True)
        return _done("Relations deleted successfully")

    @tool(READ, _READ, title="Read Graph")
    async def read_graph(
        who: Principal,
        cursor: Annotated[models.Cursor | None, Field(description="From `nextCursor` of the previous page.")] = None,
    ) -> Annotated[CallToolResult, KnowledgeGraph]:
        """Read the entire knowledge graph

        A large graph comes in pages: while the answer has `nextCursor`, call again with it as
        `cursor`.
        """
        return _reply(_graph(await services.graph.page(who, cursor), read_graph_name))

    @tool(READ, _READ, title="Search Nodes")
    async def search_nodes(
        who: Principal,
        query: Annotated[
            models.LongText,
            Field(description="The search query to match against entity names, types, and observation content"),
        ],
    ) -> Annotated[CallToolResult, KnowledgeGraph]:
        """Search for nodes in the knowledge graph based on a query"""
        return _reply(_graph(await services.graph.matching(who, query), read_graph_name))

    @tool(READ, _READ, title="Open Nodes")
    async def open_nodes(
        who: Principal,
        names: Annotated[
            list[models.ExactName], Field(max_length=batch, description="An array of entity names to retrieve")
        ],
    ) -> Annotated[CallToolResult, KnowledgeGraph]:
        """Open specific nodes in the knowledge graph by their names"""
        return _reply(_graph(await services.graph.named(who, names), read_graph_name))
