"""Native tools for entities and observations."""

# No `from __future__ import annotations`: the schemas use bounds known only at registration.
from datetime import datetime
from functools import partial
from typing import Annotated, Literal

from pydantic import Field

from app.answers import entities as shown
from app.answers.form import Detail, MaxTokens
from app.auth.principal import READ, WRITE, Principal
from app.errors import EngramError
from app.mcp.toolset import ADDITIVE, DESTRUCTIVE, READ_ONLY, ToolSet
from app.services import Services, models
from app.services.filters import EntityFilters, moment, time_range

ENTITY_TOKENS = 4000  # room for one entity read whole: ~120 facts of a sentence each
EntityId = models.Id | None
EntityName = models.Ref | None


def one_ref(id: str | None, name: str | None) -> str:
    """The entity a call names: the tool set has checked that it gives exactly one of the two."""
    return (id or name or "").strip()


def register(tool: ToolSet, services: Services) -> None:
    batch = services.limits.max_batch
    cap = services.limits.max_results

    @tool(WRITE, ADDITIVE, title="Save entities", answer=shown.upserted)
    async def upsert_entities(
        who: Principal,
        entities: Annotated[list[models.EntityIn], Field(min_length=1, max_length=batch)],
        on_existing: Literal["merge", "skip", "error"] = "merge",
        source: Annotated[
            models.Source | None,
            Field(description="Default: your client id."),
        ] = None,
    ) -> models.UpsertResult:
        """Create entities, or merge into those of the same name (`on_existing` merge: set the given
        fields, merge `properties` by key, append new observations).
        """
        return await services.entities.upsert(who, entities, on_existing, source)

    @tool(READ, READ_ONLY, title="Read an entity", one_of=("id", "name"), answer=shown.ENTITY)
    async def get_entity(
        who: Principal,
        id: EntityId = None,
        name: EntityName = None,
        include_relations: bool = True,
        include_history: bool = False,
        max_observations: Annotated[int, Field(ge=0, le=1000)] = 100,
        as_of: models.AsOf = None,
        include_invalid: models.IncludeInvalid = False,
        observations_first: Annotated[
            Literal["oldest", "newest", "relevant"],
            Field(description="`relevant` needs `query`."),
        ] = "oldest",
        query: Annotated[models.LongText | None, Field(description="What the observations should answer.")] = None,
        max_tokens: MaxTokens = ENTITY_TOKENS,
        detail: Detail = "concise",
    ) -> models.Entity:
        """Read one entity by id or name (exact, else ignoring case; several match: `ambiguous`): fields,
        aliases, observations, relations, latest changes (`include_history`).
        """
        if (observations_first == "relevant") != (query is not None and bool(query.strip())):
            raise EngramError("invalid", "`query` goes with `observations_first: relevant`, and only with it")
        return await services.entities.get(
            who,
            one_ref(id, name),
            include_relations=include_relations,
            include_history=include_history,
            max_observations=max_observations,
            when=moment(as_of, include_invalid),
            newest_first=observations_first == "newest",
            query=query.strip() if query is not None else None,
            budget=shown.ENTITY.budget(max_tokens, detail),
        )

    @tool(
        WRITE, DESTRUCTIVE, title="Edit an entity", one_of=("id", "name"), answer=partial(shown.changed, verb="Changed")
    )
    async def update_entity(
        who: Principal,
        changes: models.EntityPatch,
        id: EntityId = None,
        name: EntityName = None,
        expected_version: Annotated[int | None, Field(ge=1, le=2**31 - 1)] = None,
    ) -> models.ChangeResult:
        """Change one entity's fields (others stay): `properties` merge by key, `unset_properties` removes
        keys, `clear` empties fields. A stale `expected_version` is a `conflict`.
        """
        return await services.entities.update(who, one_ref(id, name), changes, expected_version)

    @tool(WRITE, DESTRUCTIVE, title="Delete entities", answer=shown.removed)
    async def remove_entities(
        who: Principal,
        entities: Annotated[list[models.Ref], Field(min_length=1, max_length=batch, description="Ids or names.")],
    ) -> models.ChangeResult:
        """Soft-delete entities and their relations; restore_entities undoes it. An unknown one fails
        the call.
        """
        return await services.entities.set_deleted(who, entities, True)

    @tool(WRITE, ADDITIVE, title="Restore entities", answer=partial(shown.changed, verb="Restored"))
    async def restore_entities(
        who: Principal,
        ids: Annotated[list[models.Id], Field(min_length=1, max_length=batch)],
    ) -> models.ChangeResult:
        """Undo remove_entities (by id), observations and relations included; `conflict` if a live entity
        took the name.
        """
        return await services.entities.set_deleted(who, ids, False)

    @tool(WRITE, ADDITIVE, title="Add facts", answer=partial(shown.observations_changed, verb="added"))
    async def append_observations(
        who: Principal, items: Annotated[list[models.NewObservations], Field(min_length=1, max_length=batch)]
    ) -> models.ObservationsResult:
        """Add facts to entities (exact duplicates skipped; an ended fact written again is valid anew).
        An unknown entity fails the call.
        """
        return await services.entities.change_observations(who, items, add=True)

    @tool(WRITE, DESTRUCTIVE, title="End facts", answer=partial(shown.observations_changed, verb="ended"))
    async def invalidate_observations(
        who: Principal,
        items: Annotated[list[models.ObservationsIn], Field(min_length=1, max_length=batch)],
        at: models.At = None,
        reason: models.WhyEnded = None,
    ) -> models.ObservationsResult:
        """End facts no longer true ("Ada no longer works at Acme") without deleting them: `as_of` still
        sees them. Mistakes: remove_observations.
        """
        return await services.entities.invalidate_observations(who, items, at, reason)

    @tool(WRITE, DESTRUCTIVE, title="Delete facts", answer=partial(shown.observations_changed, verb="deleted"))
    async def remove_observations(
        who: Principal, items: Annotated[list[models.ObservationsIn], Field(min_length=1, max_length=batch)]
    ) -> models.ObservationsResult:
        """Delete facts by exact text (mistakes; texts not stored are ignored). An unknown entity
        fails the call.
        """
        return await services.entities.change_observations(who, items, add=False)

    @tool(READ, READ_ONLY, title="Entity history", one_of=("id", "name"), answer=shown.history)
    async def entity_history(
        who: Principal,
        id: EntityId = None,
        name: EntityName = None,
        limit: Annotated[int, Field(ge=1, le=cap)] = 20,
        cursor: models.Cursor | None = None,
        detail: Detail = "concise",
    ) -> models.HistoryPage:
        """An entity's changes, newest first: when, who, what (fields old → new, facts, relations,
        merges).
        """
        return await services.entities.history(who, one_ref(id, name), limit, cursor)

    @tool(READ, READ_ONLY, title="List entities", answer=shown.found)
    async def find_entities(
        who: Principal,
        name_contains: models.Text | None = None,
        text_contains: models.Text | None = None,
        types: Annotated[list[models.TypeName] | None, Field(max_length=20)] = None,
        area: models.Label | None = None,
        topic: models.Label | None = None,
        subtopic: models.Label | None = None,
        certainty_min: models.Certainty | None = None,
        certainty_max: models.Certainty | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        sources: models.Sources = None,
        since: models.Since = None,
        until: models.Until = None,
        as_of: models.AsOf = None,
        include_invalid: models.IncludeInvalid = False,
        sort: Literal["recent", "name", "certainty"] = "recent",
        limit: Annotated[int, Field(ge=1, le=cap)] = 20,
        cursor: models.Cursor | None = None,
        detail: Detail = "concise",
    ) -> models.EntityPage:
        """List entities matching all filters; `name_contains` covers aliases, `text_contains` any text,
        `sources`/`since`/`until` the observations.
        """
        time_range(since, until)
        filters = EntityFilters(
            name_contains=name_contains,
            text_contains=text_contains,
            types=types,
            area=area,
            topic=topic,
            subtopic=subtopic,
            certainty_min=certainty_min,
            certainty_max=certainty_max,
            created_after=created_after,
            created_before=created_before,
            sources=sources,
            since=since,
            until=until,
            when=moment(as_of, include_invalid),
        )
        return await services.entities.find(who, filters, sort, limit, cursor)
