"""`recall` (facts that answer a question) and the episode tools."""

# No `from __future__ import annotations`: the schemas use bounds known only at registration.

from typing import Annotated

from pydantic import Field

from app.auth.principal import READ, WRITE, Principal
from app.errors import EngramError
from app.mcp.toolset import ADDITIVE, DESTRUCTIVE, READ_ONLY, ToolSet
from app.services import Services, models
from app.services.filters import RecallFilters, moment, time_range
from app.services.recall import RecallQuery
from app.services.recall_models import EpisodeIn, EpisodePage, EpisodesChanged, EpisodesWritten, RecallResult
from app.services.search_models import Mode

QueryText = Annotated[models.LongText, Field(min_length=1, description="The question, in plain words.")]
EpisodeId = Annotated[int, Field(ge=1, le=2**63 - 1)]
FactSince = Annotated[
    models.Moment | None, Field(description="Only facts from this time on (an episode's `at`, else written).")
]
FactUntil = Annotated[models.Moment | None, Field(description="Only facts from before this time.")]


def register(tool: ToolSet, services: Services) -> None:
    batch = services.limits.max_batch
    cap = services.limits.max_results

    @tool(READ, READ_ONLY)
    async def recall(
        who: Principal,
        query: QueryText,
        mode: Mode = "hybrid",
        types: Annotated[
            list[models.TypeName] | None, Field(max_length=20, description="Only facts about entities of these types.")
        ] = None,
        sources: models.Sources = None,
        since: FactSince = None,
        until: FactUntil = None,
        as_of: models.AsOf = None,
        include_invalid: models.IncludeInvalid = False,
        limit: Annotated[int, Field(ge=1, le=50)] = 10,
        cursor: Annotated[models.Cursor | None, Field(description="`next_cursor` of the previous page.")] = None,
    ) -> RecallResult:
        """What do I know that answers this? Facts ranked one by one, best first: observations,
        relations (as sentences), episodes and descriptions, each with its entity (or a relation's
        ends, an episode's entities), source, author, times and validity. Entities the question
        names, and their neighbours, lift their own facts. Use it to answer a question from memory;
        use `search` to find entities. Paged: pass `next_cursor` back as `cursor`.
        """
        time_range(since, until)
        if not query.strip():
            raise EngramError("invalid", "`query` must contain more than white space")
        scope = RecallFilters(
            types=types, sources=sources, since=since, until=until, when=moment(as_of, include_invalid)
        )
        return await services.recall.recall(
            who, RecallQuery(text=query.strip(), mode=mode, scope=scope, limit=limit, cursor=cursor)
        )

    @tool(WRITE, ADDITIVE)
    async def add_episodes(
        who: Principal,
        episodes: Annotated[list[EpisodeIn], Field(min_length=1, max_length=batch)],
        source: Annotated[
            models.Source | None, Field(description="Where this call's episodes came from; default your client id.")
        ] = None,
    ) -> EpisodesWritten:
        """Keep raw memories that are not a fact about one entity: a message, a meeting note, a
        captured chat, a document chunk (≤ 8,000 characters each). Give when it happened (`at`),
        who spoke (`speakers`) and who took part (`participants`) by entity id or name; entities
        whose name or alias the text mentions are linked too. Episodes are recalled, listed and
        shown with their entities. Write facts (observations) for what is worth keeping as such.
        """
        return await services.episodes.add(who, episodes, source)

    @tool(READ, READ_ONLY)
    async def list_episodes(
        who: Principal,
        entity: Annotated[
            models.Ref | None, Field(description="Only episodes involving this entity (id or name).")
        ] = None,
        sources: models.Sources = None,
        since: Annotated[
            models.Moment | None, Field(description="Only episodes that happened at or after this.")
        ] = None,
        until: Annotated[models.Moment | None, Field(description="Only episodes that happened before this.")] = None,
        as_of: models.AsOf = None,
        include_invalid: models.IncludeInvalid = False,
        limit: Annotated[int, Field(ge=1, le=cap)] = 20,
        cursor: models.Cursor | None = None,
    ) -> EpisodePage:
        """Episodes newest first by when they happened, with their entities. Paged: pass
        `next_cursor` back as `cursor`."""
        time_range(since, until)
        return await services.episodes.list(
            who,
            entity=entity,
            sources=sources,
            since=since,
            until=until,
            as_of=as_of,
            include_invalid=include_invalid,
            limit=limit,
            cursor=cursor,
        )

    @tool(WRITE, DESTRUCTIVE)
    async def invalidate_episodes(
        who: Principal,
        ids: Annotated[list[EpisodeId], Field(min_length=1, max_length=batch)],
        at: models.At = None,
        reason: models.WhyEnded = None,
    ) -> EpisodesChanged:
        """Mark episodes as no longer holding, without deleting them: from `at` (default now) reads
        stop showing them; `as_of` earlier and `include_invalid` still do. Returns those ended."""
        return await services.episodes.end(who, ids, at, reason)

    @tool(WRITE, DESTRUCTIVE)
    async def remove_episodes(
        who: Principal, ids: Annotated[list[EpisodeId], Field(min_length=1, max_length=batch)]
    ) -> EpisodesChanged:
        """Delete episodes for good (mistakes, or what must be forgotten). Returns those deleted."""
        return await services.episodes.remove(who, ids)
