"""`recall` (facts that answer a question) and the episode tools."""

# No `from __future__ import annotations`: the schemas use bounds known only at registration.

from functools import partial
from typing import Annotated

from pydantic import Field

from app.answers import recall as shown
from app.answers.form import Detail, MaxTokens
from app.auth.principal import READ, WRITE, Principal
from app.errors import EngramError
from app.mcp.toolset import ADDITIVE, DESTRUCTIVE, READ_ONLY, ToolSet
from app.services import Services, models
from app.services.filters import Scope, moment, time_range
from app.services.recall import RecallQuery
from app.services.recall_models import EpisodeIn, EpisodePage, EpisodesChanged, EpisodesWritten, RecallResult
from app.services.search_models import Mode

QueryText = Annotated[models.LongText, Field(min_length=1, description="In plain words.")]
EpisodeId = Annotated[int, Field(ge=1, le=2**63 - 1)]
FactSince = Annotated[models.Moment | None, Field(description="Only facts since (episodes by `at`).")]
RECALL_TOKENS = 1000  # a recall answer's default room: what a turn of conversation can spare
LIST_TOKENS = 2000
FactUntil = Annotated[models.Moment | None, Field(description="Only facts from before then.")]


def register(tool: ToolSet, services: Services) -> None:
    batch = services.limits.max_batch
    cap = services.limits.max_results

    @tool(READ, READ_ONLY, title="Recall facts", answer=shown.RECALL)
    async def recall(
        who: Principal,
        query: QueryText,
        mode: Mode = "hybrid",
        types: Annotated[
            list[models.TypeName] | None, Field(max_length=20, description="Only about entities of these types.")
        ] = None,
        sources: models.Sources = None,
        since: FactSince = None,
        until: FactUntil = None,
        as_of: models.AsOf = None,
        include_invalid: models.IncludeInvalid = False,
        limit: Annotated[int, Field(ge=1, le=50)] = 10,
        cursor: Annotated[models.Cursor | None, Field(description="From `next_cursor`.")] = None,
        max_tokens: MaxTokens = RECALL_TOKENS,
        detail: Detail = "concise",
    ) -> RecallResult:
        """Answer a question from memory: facts ranked one by one (observations, relations, episodes,
        descriptions) with their entity, source and times. Use it before answering.
        """
        time_range(since, until)
        if not query.strip():
            raise EngramError("invalid", "`query` must contain more than white space")
        scope = Scope(types=types, sources=sources, since=since, until=until, when=moment(as_of, include_invalid))
        room = shown.RECALL.budget(max_tokens, detail)
        return await services.recall.recall(
            who, RecallQuery(text=query.strip(), mode=mode, scope=scope, limit=limit, cursor=cursor, budget=room)
        )

    @tool(WRITE, ADDITIVE, title="Add episodes", answer=shown.episodes_written)
    async def add_episodes(
        who: Principal,
        episodes: Annotated[list[EpisodeIn], Field(min_length=1, max_length=batch)],
        source: Annotated[models.Source | None, Field(description="Default: your client id.")] = None,
    ) -> EpisodesWritten:
        """Keep raw memories that are not one entity's fact (a message, note, chat, document chunk) with
        when, who spoke, who took part; entities it names are linked. Shared with the tenant unless
        `private` (then only you see it).
        """
        return await services.episodes.add(who, episodes, source)

    @tool(READ, READ_ONLY, title="List episodes", answer=shown.EPISODES)
    async def list_episodes(
        who: Principal,
        entity: Annotated[models.Ref | None, Field(description="Only those involving this entity.")] = None,
        sources: models.Sources = None,
        since: Annotated[models.Moment | None, Field(description="Only those since.")] = None,
        until: Annotated[models.Moment | None, Field(description="Only those before.")] = None,
        as_of: models.AsOf = None,
        include_invalid: models.IncludeInvalid = False,
        limit: Annotated[int, Field(ge=1, le=cap)] = 20,
        cursor: models.Cursor | None = None,
        max_tokens: MaxTokens = LIST_TOKENS,
        detail: Detail = "concise",
    ) -> EpisodePage:
        """Episodes, newest first, with their entities."""
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
            budget=shown.EPISODES.budget(max_tokens, detail),
        )

    @tool(WRITE, DESTRUCTIVE, title="End episodes", answer=partial(shown.episodes_changed, verb="Ended"))
    async def invalidate_episodes(
        who: Principal,
        ids: Annotated[list[EpisodeId], Field(min_length=1, max_length=batch)],
        at: models.At = None,
        reason: models.WhyEnded = None,
    ) -> EpisodesChanged:
        """Mark episodes as no longer holding from `at`, without deleting them."""
        return await services.episodes.end(who, ids, at, reason)

    @tool(WRITE, DESTRUCTIVE, title="Delete episodes", answer=partial(shown.episodes_changed, verb="Deleted"))
    async def remove_episodes(
        who: Principal, ids: Annotated[list[EpisodeId], Field(min_length=1, max_length=batch)]
    ) -> EpisodesChanged:
        """Delete episodes for good (mistakes, or what must be forgotten)."""
        return await services.episodes.remove(who, ids)
