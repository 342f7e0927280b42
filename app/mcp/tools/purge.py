"""purge_entities: forget entities for good (memory:admin), after a preview (docs/tools.md)."""

# No `from __future__ import annotations`: the schemas use bounds known only at registration.
from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from app.answers import purge as shown
from app.auth.principal import ADMIN, Principal
from app.mcp.toolset import DESTRUCTIVE, ToolSet
from app.services import Services, models
from app.services.purges import PrivateErased, PurgeResult

Subject = Annotated[str, StringConstraints(min_length=1, max_length=300), models.Clean]


def register(tool: ToolSet, services: Services) -> None:
    batch = services.limits.max_batch

    @tool(ADMIN, DESTRUCTIVE, title="Purge entities", answer=shown.purged)
    async def purge_entities(
        who: Principal,
        entities: Annotated[
            list[models.Ref], Field(min_length=1, max_length=batch, description="Ids, names or aliases; deleted too.")
        ],
        confirm: Annotated[
            int | None,
            Field(ge=0, le=1_000_000, description="The number of entities the preview said; omit to preview."),
        ] = None,
        episodes: Annotated[
            Literal["keep", "remove"],
            Field(description="Episodes that mention them (linked, or naming them in their text): keep or remove."),
        ] = "keep",
    ) -> PurgeResult:
        """Erase entities for good, unlike remove_entities: with their observations, relations,
        aliases, history, search documents and episode links. Call once without confirm to see what
        would go, then with confirm = that number of entities. Cannot be undone.
        """
        return await services.purges.purge(who, entities, confirm=confirm, episodes=episodes)

    @tool(ADMIN, DESTRUCTIVE, title="Erase a private memory", answer=shown.private_erased)
    async def erase_private_memory(
        who: Principal,
        subject: Annotated[Subject, Field(description="The member's token subject (as the audit log names callers).")],
        issuer: Annotated[
            Subject | None, Field(description="The issuer of the member's tokens; default: your own token's.")
        ] = None,
        confirm: Annotated[
            int | None,
            Field(ge=0, le=1_000_000_000, description="The number of episodes the preview said; omit to preview."),
        ] = None,
    ) -> PrivateErased:
        """Erase one member's private memory for good (every episode only they see), without reading
        it: you are told how many. Call once without confirm, then with confirm = that number.
        """
        return await services.purges.erase_private(who, subject, issuer, confirm=confirm)
