"""Native tools for entities and observations."""

# No `from __future__ import annotations`: the schemas use bounds known only at registration.
from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field

from app.auth.principal import READ, WRITE, Principal
from app.errors import EngramError
from app.mcp.toolset import ADDITIVE, DESTRUCTIVE, READ_ONLY, ToolSet
from app.services import Services, models
from app.services.filters import EntityFilters, moment, time_range

EntityId = Annotated[models.Id | None, Field(description="The entity's id.")]
EntityName = Annotated[models.Ref | None, Field(description="The entity's name.")]


def one_ref(id: str | None, name: str | None) -> str:
    if (id is None) == (name is None):
        raise EngramError("invalid", "give exactly one of `id` or `name`")
    return (id or name or "").strip()


def register(tool: ToolSet, services: Services) -> None:
    batch = services.limits.max_batch
    cap = services.limits.max_results

    @tool(WRITE, ADDITIVE)
    async def upsert_entities(
        who: Principal,
        entities: Annotated[list[models.EntityIn], Field(min_length=1, max_length=batch)],
        on_existing: Literal["merge", "skip", "error"] = "merge",
        source: Annotated[
            models.Source | None,
            Field(description="Where the observations of this call came from; default: your client id."),
        ] = None,
    ) -> models.UpsertResult:
        """Create entities, or merge into existing ones of the same exact name.

        `on_existing`: `merge` (default) sets the given fields, merges `properties` by key and
        appends new observations (exact duplicates skipped); `skip` leaves existing ones alone;
        `error` fails the call if any name exists. One transaction. Returns, per name, created,
        updated, unchanged or skipped, with id and version. `source`: where the observations came
        from; an entry's `valid_from`/`valid_until`: when its observations hold (default always).
        """
        return await services.entities.upsert(who, entities, on_existing, source)

    @tool(READ, READ_ONLY)
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
            Field(description="Which observations come first (and stay when capped); `relevant` needs `query`."),
        ] = "oldest",
        query: Annotated[
            models.LongText | None, Field(description="With `relevant`: what the observations should answer.")
        ] = None,
    ) -> models.Entity:
        """Read one entity by id or name: fields, observations, direct relations and, with
        `include_history`, its 20 latest changes. An entity with many facts: `observations_first`
        `newest`, or `relevant` to a `query`, with `max_observations`.

        A name matches exactly, else case-insensitively; several such matches fail with `ambiguous`,
        listing them. Shows facts valid now; `as_of` reads them as they were at a time,
        `include_invalid` shows all. `observation_records` gives each one's source, author, time
        and validity.
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
        )

    @tool(WRITE, DESTRUCTIVE)
    async def update_entity(
        who: Principal,
        changes: models.EntityPatch,
        id: EntityId = None,
        name: EntityName = None,
        expected_version: Annotated[int | None, Field(ge=1, le=2**31 - 1)] = None,
    ) -> models.ChangeResult:
        """Change fields of one entity (id or name): name, type, description, category, certainty,
        properties.

        Fields left out keep their value; `properties` merge by key; `unset_properties` removes
        keys; `clear` empties fields. With `expected_version` (from get_entity), a newer stored
        version fails with `conflict`. Old values go to history.
        """
        return await services.entities.update(who, one_ref(id, name), changes, expected_version)

    @tool(WRITE, DESTRUCTIVE)
    async def remove_entities(
        who: Principal,
        entities: Annotated[list[models.Ref], Field(min_length=1, max_length=batch, description="Ids or names.")],
    ) -> models.ChangeResult:
        """Soft-delete entities (id or name) and their relations: they vanish from every read;
        restore_entities brings them back. An unknown name fails the whole call (`not_found`).
        """
        return await services.entities.set_deleted(who, entities, True)

    @tool(WRITE, ADDITIVE)
    async def restore_entities(
        who: Principal,
        ids: Annotated[list[models.Id], Field(min_length=1, max_length=batch)],
    ) -> models.ChangeResult:
        """Undo remove_entities: bring entities (by id) back with their observations and relations.
        `conflict` if a live entity took the name meanwhile.
        """
        return await services.entities.set_deleted(who, ids, False)

    @tool(WRITE, ADDITIVE)
    async def append_observations(
        who: Principal, items: Annotated[list[models.NewObservations], Field(min_length=1, max_length=batch)]
    ) -> models.ObservationsResult:
        """Add facts to existing entities (id or name); exact duplicates are skipped. Each item may
        say when its facts hold (`valid_from`, `valid_until`; default always) and where they came
        from (`source`; default your client id); an ended fact written again is valid anew. An
        unknown entity fails the whole call. Returns what each entity gained.
        """
        return await services.entities.change_observations(who, items, add=True)

    @tool(WRITE, DESTRUCTIVE)
    async def invalidate_observations(
        who: Principal,
        items: Annotated[list[models.ObservationsIn], Field(min_length=1, max_length=batch)],
        at: models.At = None,
        reason: models.WhyEnded = None,
    ) -> models.ObservationsResult:
        """Mark facts as no longer true without deleting them: "Ada no longer works at Acme".

        Each given observation (exact text) that is valid past `at` (default now) gets `valid_until`
        = `at`: reads stop showing it from then on, while `as_of` reads of earlier times and
        `include_invalid` still see it. Texts not stored, or already ended by then, are left alone.
        The end and `reason` go to the entity's history. Use remove_observations only for facts
        that were never true (mistakes). Returns what each entity had ended.
        """
        return await services.entities.invalidate_observations(who, items, at, reason)

    @tool(WRITE, DESTRUCTIVE)
    async def remove_observations(
        who: Principal, items: Annotated[list[models.ObservationsIn], Field(min_length=1, max_length=batch)]
    ) -> models.ObservationsResult:
        """Delete facts from entities by exact text; texts not stored are ignored. An unknown entity
        fails the whole call. Returns what each entity lost.
        """
        return await services.entities.change_observations(who, items, add=False)

    @tool(READ, READ_ONLY)
    async def entity_history(
        who: Principal,
        id: EntityId = None,
        name: EntityName = None,
        limit: Annotated[int, Field(ge=1, le=cap)] = 20,
        cursor: models.Cursor | None = None,
    ) -> models.HistoryPage:
        """An entity's changes, newest first, with when and by whom: fields (old → new), observations,
        relations, deletions, restores. Paged: pass `next_cursor` back as `cursor`.
        """
        return await services.entities.history(who, one_ref(id, name), limit, cursor)

    @tool(READ, READ_ONLY)
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
    ) -> models.EntityPage:
        """List entities matching all given filters, sorted, a page at a time.

        `name_contains`: names and aliases, ignoring case (`matched_alias` says which alias);
        `text_contains`: names, types, descriptions, observations, property values; `types`: exact.
        `sources`, `since`, `until`: an observation from those sources written in that range.
        `sort`: recent (last changed first), name, or certainty (highest first). Returns the page,
        the total and `next_cursor` (pass it back as `cursor` with the same filters). For questions
        in plain words, use `search`.
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
