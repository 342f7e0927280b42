"""Drop-in tools of `mcp-neo4j-memory`: its names (behind an optional namespace), fields and result wrapper.

Deliberate differences (docs/tools.md): a relation to a missing entity is refused instead of being
silently dropped; search_memories matches substrings (case-insensitive) instead of Lucene query
syntax; deletes are soft; read_graph is paged and the searches are capped.
"""

# No `from __future__ import annotations`: the schemas use bounds known only at registration.
import json
from typing import Annotated, Any

import pydantic_core
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from app.auth.principal import READ, WRITE, Principal
from app.mcp.tools import slices
from app.mcp.toolset import ToolSet
from app.services import Services, models
from app.services.graph import Slice

# The original's rule for labels and relationship types (they become Cypher labels there).
Label = Annotated[str, StringConstraints(min_length=1, max_length=100, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
Observations = Annotated[list[models.Observation], Field(min_length=1, max_length=100)]


def tool_prefix(namespace: str) -> str:
    """The original's rule: a namespace prefixes every tool name, joined by one hyphen."""
    return namespace if not namespace or namespace.endswith("-") else namespace + "-"


def _hints(title: str, *, read_only: bool = False, destructive: bool = False) -> ToolAnnotations:
    """The original's annotations, except openWorldHint: Engram reaches nothing outside its database."""
    return ToolAnnotations(
        title=title,
        read_only_hint=read_only,
        destructive_hint=destructive,
        idempotent_hint=True,
        open_world_hint=False,
    )


# Outputs carry no input bounds: the graph may hold types written by the other tool sets ("works at").
class Entity(BaseModel):
    name: str
    type: str
    observations: list[str]


class Relation(BaseModel):
    source: str
    target: str
    relationType: str


class EntityIn(Entity):
    model_config = ConfigDict(extra="forbid")
    name: models.Name = Field(description="Unique identifier/name for the entity. Should be descriptive and specific.")
    type: Label = Field(description="Category or classification of the entity, e.g. person, company, location")
    observations: Annotated[list[models.Observation], Field(max_length=100)] = Field(
        description="List of facts, observations, or notes about this entity. Each one a standalone fact."
    )


class RelationIn(Relation):
    model_config = ConfigDict(extra="forbid")
    source: models.Name = Field(description="Name of the source entity (must match an existing entity name exactly)")
    target: models.Name = Field(description="Name of the target entity (must match an existing entity name exactly)")
    relationType: Label = Field(description="Type of relationship, e.g. WORKS_AT, LIVES_IN")


class RelationRef(RelationIn):
    """A relationship to delete: any stored type, so whatever read_graph shows can be deleted."""

    relationType: models.TypeName = Field(description="Type of the relationship, exactly as stored")


class ObservationAddition(BaseModel):
    model_config = ConfigDict(extra="forbid")
    entityName: models.Name = Field(description="Exact name of the existing entity to add observations to")
    observations: Observations = Field(description="New observations/facts to add to the entity")


class ObservationDeletion(BaseModel):
    model_config = ConfigDict(extra="forbid")
    entityName: models.Name = Field(description="Exact name of the existing entity to remove observations from")
    observations: Observations = Field(description="Exact observation texts to delete from the entity")


class KnowledgeGraph(BaseModel):
    entities: list[Entity] = []
    relations: list[Relation] = []
    # Engram's bounds: present only when a result was cut.
    nextCursor: str | None = Field(None, description="read_graph: pass back as `cursor` for the next page.")
    note: str | None = None
    truncated: bool | None = Field(None, description="Present (true) when a bound cut this answer; `note` says how.")


class Result(BaseModel):
    result: Any


def _result(value: Any) -> CallToolResult:
    """The original's write answers: `{"result": value}`, and as text the value (a message, or Python's JSON)."""
    text = value if isinstance(value, str) else json.dumps(value)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content={"result": value})


def _graph(graph: Slice, read_graph: str) -> CallToolResult:
    """KnowledgeGraph built as the JSON it is sent as (the SDK validates it once against the output model)."""
    data: dict[str, Any] = {
        "entities": [
            {"name": x.entity.name, "type": x.entity.type, "observations": list(x.observations)} for x in graph.entities
        ],
        "relations": [{"source": r.from_, "target": r.to, "relationType": r.type} for r in graph.relations],
    }
    bounds = (
        ("nextCursor", graph.next_cursor),
        ("note", slices.note(graph, read_graph)),
        ("truncated", slices.truncated(graph)),
    )
    data.update((key, value) for key, value in bounds if value is not None)
    return CallToolResult(
        content=[TextContent(type="text", text=pydantic_core.to_json(data).decode())], structured_content=data
    )


def register(tool: ToolSet, services: Services) -> None:
    batch = services.limits.max_batch
    read_graph_name = tool.prefix + "read_graph"

    @tool(READ, _hints("Read Graph", read_only=True))
    async def read_graph(
        who: Principal,
        cursor: Annotated[models.Cursor | None, Field(description="From `nextCursor` of the previous page.")] = None,
    ) -> Annotated[CallToolResult, KnowledgeGraph]:
        """Read the entire knowledge graph with all entities and relationships.

        A large graph comes in pages: while the answer has `nextCursor`, call again with it as
        `cursor`.
        """
        return _graph(await services.graph.page(who, cursor), read_graph_name)

    @tool(WRITE, _hints("Create Entities"))
    async def create_entities(
        who: Principal,
        entities: Annotated[
            list[EntityIn],
            Field(max_length=batch, description="List of entities to create with name, type, and observations"),
        ],
    ) -> Annotated[CallToolResult, Result]:
        """Create multiple new entities in the knowledge graph.

        An existing name takes the given type and observations (they replace the stored ones).
        """
        last = {e.name: e for e in entities}  # like the original's MERGE one by one: the last entry of a name wins
        await services.entities.put(who, [(e.name, e.type, e.observations) for e in last.values()])
        return _result([e.model_dump() for e in entities])

    @tool(WRITE, _hints("Create Relations"))
    async def create_relations(
        who: Principal,
        relations: Annotated[
            list[RelationIn],
            Field(max_length=batch, description="List of relations to create between existing entities"),
        ],
    ) -> Annotated[CallToolResult, Result]:
        """Create multiple new relationships between existing entities in the knowledge graph.

        Both ends must exist (exact names), else nothing is created; an existing one is not created
        twice.
        """
        if relations:
            await services.relations.connect(
                who,
                [models.RelationIn(from_=r.source, to=r.target, type=r.relationType) for r in relations],
                exact=True,
            )
        return _result([r.model_dump() for r in relations])

    @tool(WRITE, _hints("Add Observations"))
    async def add_observations(
        who: Principal,
        observations: Annotated[
            list[ObservationAddition],
            Field(max_length=batch, description="List of observations to add to existing entities"),
        ],
    ) -> Annotated[CallToolResult, Result]:
        """Add new observations/facts to existing entities in the knowledge graph.

        Unknown entities are skipped; texts already stored are not added again.
        """
        changed = await services.entities.change_observations_by_name(
            who, [(o.entityName, o.observations) for o in observations], add=True, missing_ok=True
        )
        data = [
            {"entityName": o.entityName, "addedObservations": c}
            for o, c in zip(observations, changed, strict=True)
            if c is not None  # like the original's MATCH, a missing entity yields no row
        ]
        return _result(data)

    @tool(WRITE, _hints("Delete Entities", destructive=True))
    async def delete_entities(
        who: Principal,
        entityNames: Annotated[
            list[models.Name], Field(max_length=batch, description="List of exact entity names to delete")
        ],
    ) -> Annotated[CallToolResult, Result]:
        """Delete entities and all their associated relationships from the knowledge graph.

        Exact names; unknown ones are ignored.
        """
        await services.entities.delete_by_name(who, entityNames)
        return _result("Entities deleted successfully")

    @tool(WRITE, _hints("Delete Observations", destructive=True))
    async def delete_observations(
        who: Principal,
        deletions: Annotated[
            list[ObservationDeletion],
            Field(max_length=batch, description="List of specific observations to remove from entities"),
        ],
    ) -> Annotated[CallToolResult, Result]:
        """Delete specific observations from existing entities in the knowledge graph.

        Exact texts; unknown entities and texts are ignored.
        """
        await services.entities.change_observations_by_name(
            who, [(d.entityName, d.observations) for d in deletions], add=False, missing_ok=True
        )
        return _result("Observations deleted successfully")

    @tool(WRITE, _hints("Delete Relations", destructive=True))
    async def delete_relations(
        who: Principal,
        relations: Annotated[
            list[RelationRef],
            Field(max_length=batch, description="List of specific relationships to delete from the graph"),
        ],
    ) -> Annotated[CallToolResult, Result]:
        """Delete specific relationships between entities in the knowledge graph.

        Exact matches, any stored type; unknown ones are ignored.
        """
        keys = [models.RelationKey(from_=r.source, to=r.target, type=r.relationType) for r in relations]
        if keys:
            await services.relations.disconnect(who, keys, [], exact=True)
        return _result("Relations deleted successfully")

    @tool(READ, _hints("Search Memories", read_only=True))
    async def search_memories(
        who: Principal,
        query: Annotated[
            models.LongText,
            StringConstraints(min_length=1),
            Field(description="Text to find in entity names, types or observations (case-insensitive)"),
        ],
    ) -> Annotated[CallToolResult, KnowledgeGraph]:
        """Search for entities in the knowledge graph whose name, type or an observation contains the
        query, ignoring case, with the relationships that touch them.
        """
        return _graph(await services.graph.matching(who, query), read_graph_name)

    @tool(READ, _hints("Find Memories by Name", read_only=True))
    async def find_memories_by_name(
        who: Principal,
        names: Annotated[
            list[models.Name], Field(max_length=batch, description="List of exact entity names to retrieve")
        ],
    ) -> Annotated[CallToolResult, KnowledgeGraph]:
        """Find specific entities by their exact names, with the relationships that touch them."""
        return _graph(await services.graph.named(who, names), read_graph_name)
