"""The `search` tool: find entities by meaning and by words."""

# No `from __future__ import annotations`: the schemas use bounds known only at registration.

from typing import Annotated

from pydantic import Field

from app.answers import search as shown
from app.answers.form import Detail, MaxTokens
from app.auth.principal import READ, Principal
from app.errors import EngramError
from app.mcp.toolset import READ_ONLY, ToolSet
from app.services import Services
from app.services.filters import Scope, moment, time_range
from app.services.models import (
    AsOf,
    Certainty,
    Cursor,
    IncludeInvalid,
    Label,
    LongText,
    Since,
    Sources,
    TypeName,
    Until,
)
from app.services.search import Query
from app.services.search_models import Mode, SearchResult

SEARCH_TOKENS = 1000
QueryText = Annotated[LongText, Field(min_length=1, description="Any words.")]


def register(tool: ToolSet, services: Services) -> None:
    @tool(READ, READ_ONLY, name="search", title="Search memory", answer=shown.HITS)
    async def search_tool(
        who: Principal,
        query: QueryText,
        mode: Mode = "hybrid",
        types: Annotated[list[TypeName] | None, Field(max_length=20, description="Only these entity types.")] = None,
        area: Label | None = None,
        topic: Label | None = None,
        min_certainty: Certainty | None = None,
        max_certainty: Certainty | None = None,
        min_score: Annotated[
            float | None,
            Field(ge=0, le=1, allow_inf_nan=False, description="Drop hits scoring below this."),
        ] = None,
        sources: Sources = None,
        since: Since = None,
        until: Until = None,
        as_of: AsOf = None,
        include_invalid: IncludeInvalid = False,
        limit: Annotated[int, Field(ge=1, le=50)] = 10,
        cursor: Annotated[Cursor | None, Field(description="From `next_cursor`.")] = None,
        max_tokens: MaxTokens = SEARCH_TOKENS,
        detail: Detail = "concise",
    ) -> SearchResult:
        """Find entities by meaning and words ("what do I know about X?"); keyword `mode` takes "a phrase",
        `or`, `-word`. Each hit: the entity and the text that matched.
        """
        time_range(since, until)
        if min_certainty is not None and max_certainty is not None and min_certainty > max_certainty:
            raise EngramError("invalid", "`min_certainty` must not exceed `max_certainty`")
        if not query.strip():
            raise EngramError("invalid", "`query` must contain more than white space")
        return await services.search.search(
            who,
            Query(
                text=query.strip(),
                mode=mode,
                scope=Scope(
                    types=types,
                    area=area,
                    topic=topic,
                    min_certainty=min_certainty,
                    max_certainty=max_certainty,
                    sources=sources,
                    since=since,
                    until=until,
                    when=moment(as_of, include_invalid),
                ),
                min_score=min_score,
                limit=limit,
                cursor=cursor,
                budget=shown.HITS.budget(max_tokens, detail),
            ),
        )
