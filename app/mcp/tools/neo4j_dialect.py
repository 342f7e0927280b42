"""Drop-in tools of `mcp-neo4j-memory`: its names (behind an optional namespace), fields and result wrapper.

Deliberate differences (docs/tools.md): a relation to a missing entity is refused instead of being
silently dropped; search_memories matches substrings (case-insensitive) instead of Lucene query
syntax; deletes are soft; results are bounded.
"""

# No `from __future__ import annotations`: the schemas use bounds known only at registration.
import json
from typing import Annotated, Any

from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field, StringConstraints

from app.auth.principal import READ, WRITE, Principal
from app.mcp.context import ToolSet
from app.services import Services, models
from app.services.graph import Slice

Name = Annotated[str, StringConstraints(min_length=1, max_length=200)]
Label = Annotated[str, StringConstraints(min_length=1, max_length=100, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
Obs = Annotated[str, StringConstraints(min_length=1, max_length=4000)]

# The original's own annotations (it declares openWorldHint=True; Engram reaches nothing outside).
_WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
_DELETE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)
_READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)


class Entity(BaseModel):
    name: Name = Field(description="Unique identifier/name for the entity. Should be descriptive and specific.")
    type: Label = Field(description="Category or classification of the entity, e.g. person, company, location")
    observations: Annotated[list[Obs], Field(max_length=100)] = Field(
        description="List of facts, observations, or notes about this entity."
    )


class Relation(BaseModel):
    source: Name = Field(description="Name of the source entity (must match an existing entity name exactly)")
    target: Name = Field(description="Name of the target entity (must match an existing entity name exactly)")
    relationType: Label = Field(description="Type of relationship, e.g. WORKS_AT, LIVES_IN")


class ObservationAddition(BaseModel):
    entityName: Name = Field(description="Exact name of the existing entity to add observations to")
    observations: Annotated[list[Obs], Field(min_length=1, max_length=100)]


class ObservationDeletion(BaseModel):
    entityName: Name = Field(description="Exact name of the existing entity to remove observations from")
    observations: Annotated[list[Obs], Field(min_length=1, max_length=100)]


class KnowledgeGraph(BaseModel):
    entities: list[Entity] = []
    relations: list[Relation] = []


class Result(BaseModel):
    result: Any


def _reply(text: str, structured: dict[str, Any]) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=structured)


def _graph(graph: Slice) -> CallToolResult:
    kg = KnowledgeGraph(
        entities=[
            Entity.model_construct(name=e.entity.name, type=e.entity.type, observations=e.observations)
            for e in graph.entities
        ],
        relations=[Relation.model_construct(source=r.from_, target=r.to, relationType=r.type) for r in graph.relations],
    )
    return _reply(kg.model_dump_json(), kg.model_dump(mode="json"))


def _done(message: str) -> CallToolResult:
    return _reply(message, {"result": message})


def register(tool: ToolSet, s: Services) -> None:
    batch = s.limits.max_batch

    @tool(READ, _READ)
    async def read_graph(who: Principal) -> KnowledgeGraph:
        """Read the entire knowledge graph with all entities and relationships.

        Returns the complete memory graph including all stored entities and their relationships.
        Use this to get a comprehensive view of all stored information. Engram returns at most one
        page of the graph here; the native tools page through the rest.
        """
        return _graph(await s.graph.page(who, None))  # type: ignore[return-value]

    @tool(WRITE, _WRITE)
    async def create_entities(who: Principal, entities: Annotated[list[Entity], Field(max_length=batch)]) -> Result:
        """Create multiple new entities in the knowledge graph.

        An entity that already exists by name takes the given type and observations (they replace
        the stored ones).
        """
        folded = list({e.name: e for e in entities}.values())
        await s.entities.put(who, [(e.name, e.type, e.observations) for e in folded])
        return _reply(json.dumps([e.model_dump() for e in entities]), {"result": [e.model_dump() for e in entities]})  # type: ignore[return-value]

    @tool(WRITE, _WRITE)
    async def create_relations(who: Principal, relations: Annotated[list[Relation], Field(max_length=batch)]) -> Result:
        """Create multiple new relationships between existing entities in the knowledge graph.

        Both entities must exist (exact names); an existing relationship is not created twice.
        """
        if relations:
            await s.relations.connect(
                who,
                [models.RelationIn(from_=r.source, to=r.target, type=r.relationType) for r in relations],
                exact=True,
            )
        data = [r.model_dump() for r in relations]
        return _reply(json.dumps(data), {"result": data})  # type: ignore[return-value]

    @tool(WRITE, _WRITE)
    async def add_observations(
        who: Principal, observations: Annotated[list[ObservationAddition], Field(max_length=batch)]
    ) -> Result:
        """Add new observations/facts to existing entities in the knowledge graph.

        Entities that do not exist are skipped; only new observations are added.
        """
        changed = await s.entities.change_observations_by_name(
            who, [(o.entityName, o.observations) for o in observations], add=True, missing_ok=True
        )
        data = [
            {"entityName": o.entityName, "addedObservations": c}
            for o, c in zip(observations, changed, strict=True)
            if c is not None  # like the original's MATCH, a missing entity yields no row
        ]
        return _reply(json.dumps(data), {"result": data})  # type: ignore[return-value]

    @tool(WRITE, _DELETE)
    async def delete_entities(
        who: Principal,
        entityNames: Annotated[list[Name], Field(max_length=batch, description="List of exact entity names to delete")],
    ) -> Result:
        """Delete entities and all their associated relationships from the knowledge graph."""
        await s.entities.delete_by_name(who, entityNames)
        return _done("Entities deleted successfully")  # type: ignore[return-value]

    @tool(WRITE, _DELETE)
    async def delete_observations(
        who: Principal, deletions: Annotated[list[ObservationDeletion], Field(max_length=batch)]
    ) -> Result:
        """Delete specific observations from existing entities in the knowledge graph."""
        await s.entities.change_observations_by_name(
            who, [(d.entityName, d.observations) for d in deletions], add=False, missing_ok=True
        )
        return _done("Observations deleted successfully")  # type: ignore[return-value]

    @tool(WRITE, _DELETE)
    async def delete_relations(who: Principal, relations: Annotated[list[Relation], Field(max_length=batch)]) -> Result:
        """Delete specific relationships between entities in the knowledge graph."""
        keys = [models.RelationKey(from_=r.source, to=r.target, type=r.relationType) for r in relations]
        if keys:
            await s.relations.disconnect(who, keys, [], exact=True)
        return _done("Relations deleted successfully")  # type: ignore[return-value]

    @tool(READ, _READ)
    async def search_memories(
        who: Principal,
        query: Annotated[
            str,
            StringConstraints(min_length=1, max_length=1000),
            Field(description="Text to find in entity names, types or observations"),
        ],
    ) -> KnowledgeGraph:
        """Search for entities in the knowledge graph by name, type, or observation content.

        Returns matching entities and the relationships that touch them.
        """
        return _graph(await s.graph.matching(who, query))  # type: ignore[return-value]

    @tool(READ, _READ)
    async def find_memories_by_name(
        who: Principal,
        names: Annotated[list[Name], Field(max_length=batch, description="List of exact entity names to retrieve")],
    ) -> KnowledgeGraph:
        """Find specific entities by their exact names, with the relationships that touch them."""
        return _graph(await s.graph.named(who, names))  # type: ignore[return-value]
