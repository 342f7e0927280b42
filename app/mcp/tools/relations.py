"""Native tools for relations."""

# No `from __future__ import annotations`: the schemas use bounds known only at registration.
from typing import Annotated

from pydantic import Field

from app.auth.principal import WRITE, Principal
from app.errors import EngramError
from app.mcp.toolset import ADDITIVE, DESTRUCTIVE, ToolSet
from app.services import Services, models


def register(tool: ToolSet, services: Services) -> None:
    batch = services.limits.max_batch

    @tool(WRITE, ADDITIVE)
    async def connect_entities(
        who: Principal, relations: Annotated[list[models.RelationIn], Field(min_length=1, max_length=batch)]
    ) -> models.ConnectResult:
        """Create directed relations between existing entities (id or name), e.g. Ada --works at-->
        Acme.

        Types are free text, in active voice. A missing end fails the call (`not_found`, nothing
        saved); an exact duplicate (from, type, to) is reported as `exists`, not created twice (an
        ended one is created again). Each may carry `valid_from`/`valid_until` and a `source`.
        """
        return await services.relations.connect(who, relations)

    @tool(WRITE, DESTRUCTIVE)
    async def disconnect_entities(
        who: Principal,
        relations: Annotated[list[models.RelationKey], Field(max_length=batch)] = [],  # noqa: B006
        ids: Annotated[list[models.Id], Field(max_length=batch)] = [],  # noqa: B006
    ) -> models.DisconnectResult:
        """Delete relations, given as (from, to, type) or by id. Missing ones are counted in
        `not_found`, not errors.
        """
        if not relations and not ids:
            raise EngramError("invalid", "give `relations` or `ids`")
        return await services.relations.disconnect(who, relations, ids)

    @tool(WRITE, DESTRUCTIVE)
    async def invalidate_relations(
        who: Principal,
        relations: Annotated[list[models.RelationKey], Field(max_length=batch)] = [],  # noqa: B006
        ids: Annotated[list[models.Id], Field(max_length=batch)] = [],  # noqa: B006
        at: models.At = None,
        reason: models.WhyEnded = None,
    ) -> models.InvalidatedRelations:
        """Mark relations as no longer true without deleting them: "Ada left Acme in 2024".

        Relations are given as (from, to, type), ends by id or name, or by relation id. Each one
        valid past `at` (default now) gets `valid_until` = `at`: walks, paths and reads stop using
        it from then on, while `as_of` reads of earlier times and `include_invalid` still see it.
        Missing relations and ones already ended by then are counted in `unchanged`. The end and
        `reason` go to both entities' history. Use disconnect_entities only for relations that were
        never true (mistakes).
        """
        if not relations and not ids:
            raise EngramError("invalid", "give `relations` or `ids`")
        return await services.relations.invalidate(who, relations, ids, at, reason)
