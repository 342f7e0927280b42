"""Native tools for relations."""

# No `from __future__ import annotations`: the schemas use bounds known only at registration.
from typing import Annotated

from pydantic import Field

from app.answers import relations as shown
from app.auth.principal import WRITE, Principal
from app.mcp.toolset import ADDITIVE, DESTRUCTIVE, ToolSet
from app.services import Services, models


def register(tool: ToolSet, services: Services) -> None:
    batch = services.limits.max_batch

    @tool(WRITE, ADDITIVE, title="Relate entities", answer=shown.connected)
    async def connect_entities(
        who: Principal, relations: Annotated[list[models.RelationIn], Field(min_length=1, max_length=batch)]
    ) -> models.ConnectResult:
        """Create directed relations between existing entities (Ada --works at--> Acme). A missing end
        fails the call; an existing one is reported `exists`.
        """
        return await services.relations.connect(who, relations)

    @tool(WRITE, DESTRUCTIVE, title="Delete relations", any_of=("relations", "ids"), answer=shown.disconnected)
    async def disconnect_entities(
        who: Principal,
        relations: Annotated[list[models.RelationKey], Field(max_length=batch)] = [],  # noqa: B006
        ids: Annotated[list[models.Id], Field(max_length=batch)] = [],  # noqa: B006
    ) -> models.DisconnectResult:
        """Delete relations (mistakes), as (from, to, type) or by id; missing ones count in
        `not_found`.
        """
        return await services.relations.disconnect(who, relations, ids)

    @tool(WRITE, DESTRUCTIVE, title="End relations", any_of=("relations", "ids"), answer=shown.relations_ended)
    async def invalidate_relations(
        who: Principal,
        relations: Annotated[list[models.RelationKey], Field(max_length=batch)] = [],  # noqa: B006
        ids: Annotated[list[models.Id], Field(max_length=batch)] = [],  # noqa: B006
        at: models.At = None,
        reason: models.WhyEnded = None,
    ) -> models.InvalidatedRelations:
        """End relations no longer true ("Ada left Acme"), by (from, to, type) or id, without deleting
        them: `as_of` still sees them. Mistakes: disconnect_entities.
        """
        return await services.relations.invalidate(who, relations, ids, at, reason)
