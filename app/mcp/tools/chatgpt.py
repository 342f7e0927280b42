"""The `chatgpt` tool set: `search` and `fetch` in the shapes ChatGPT's connectors and deep research
use (docs/tools.md, "chatgpt"): search finds entities, fetch reads one as a document, and each
result's `url` is the entity's page."""

# No `from __future__ import annotations`: the schemas use bounds known only at registration.
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import BaseModel, Field

from app.auth.principal import READ, Principal
from app.errors import EngramError
from app.mcp.toolset import READ_ONLY, ToolSet
from app.services import Services, models
from app.services.search import Query

RESULTS = 10  # what one search answers
SNIPPET = 300  # characters of a result's text
FACTS = 100  # observations a fetched document lists


class Result(BaseModel):
    id: str
    title: str
    url: str
    text: str


class Results(BaseModel):
    results: list[Result]


class Document(BaseModel):
    id: str
    title: str
    text: str
    url: str
    metadata: dict[str, Any]


def register(tool: ToolSet, services: Services, page: Callable[[models.EntitySummary], str]) -> None:
    """`page`: the URL of an entity's page (the console's, where it is served)."""

    @tool(READ, READ_ONLY, title="Search memory")
    async def search(
        who: Principal,
        query: Annotated[models.LongText, Field(min_length=1, description="Words or a question.")],
    ) -> Results:
        """Find what the memory knows about something: entities (people, projects, concepts) by meaning
        and words, best first. Read one with fetch and its id."""
        if not query.strip():
            raise EngramError("invalid", "`query` must contain more than white space")
        found = await services.search.search(who, Query(text=query.strip(), limit=RESULTS))
        return Results(
            results=[
                Result(
                    id=hit.entity.id,
                    title=_title(hit.entity),
                    url=page(hit.entity),
                    text=_clip(hit.match.text or hit.entity.description),
                )
                for hit in found.hits
            ]
        )

    @tool(READ, READ_ONLY, title="Fetch an entity")
    async def fetch(
        who: Principal, id: Annotated[models.Ref, Field(description="An id that search returned.")]
    ) -> Document:
        """Read one entity in full, as a document: what it is, its facts and its relations."""
        entity = await services.entities.get(who, id, max_observations=FACTS)
        return Document(
            id=entity.id, title=_title(entity), text=_text(entity), url=page(entity), metadata=_metadata(entity)
        )


def _title(entity: models.EntitySummary) -> str:
    return f"{entity.name} ({entity.type})"


def _clip(text: str) -> str:
    return text if len(text) <= SNIPPET else text[: SNIPPET - 1].rstrip() + "…"


def _text(entity: models.Entity) -> str:
    """The entity as plain text: the description, aliases, facts, and relations as sentences."""
    lines = [_title(entity)]
    if entity.description:
        lines += ["", entity.description]
    if entity.aliases:
        lines += ["", "Also known as: " + ", ".join(entity.aliases)]
    if entity.observations:
        lines += ["", "Facts:", *(f"- {o}" for o in entity.observations)]
        if entity.observations_total > len(entity.observations):
            lines.append(f"- … and {entity.observations_total - len(entity.observations)} more")
    if entity.relations:
        lines += ["", "Relations:", *(f"- {r.from_} {r.type} {r.to}" for r in entity.relations)]
    return "\n".join(lines)


def _metadata(entity: models.Entity) -> dict[str, Any]:
    fields = {
        "type": entity.type,
        "area": entity.area,
        "topic": entity.topic,
        "subtopic": entity.subtopic,
        "certainty": entity.certainty,
        "version": entity.version,
        "updated_at": entity.updated_at.isoformat(),
        "observations": entity.observations_total,
        "relations": len(entity.relations or []),
    }
    return {key: value for key, value in fields.items() if value is not None}
