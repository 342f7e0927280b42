"""Native tools that pin facts: a tenant's core memory, which leads every session's brief and the
recall answers it belongs to (docs/pinned-facts.md)."""

# No `from __future__ import annotations`: the schemas use bounds known only at registration.
from functools import partial
from typing import Annotated

from pydantic import Field

from app.answers import pins as shown
from app.auth.principal import WRITE, Principal
from app.mcp.toolset import ADDITIVE, ToolSet
from app.services import Services, models
from app.services.pins import PinResult


def register(tool: ToolSet, services: Services) -> None:
    batch = services.limits.max_batch

    @tool(WRITE, ADDITIVE, title="Pin facts", answer=partial(shown.marked, verb="Pinned"))
    async def pin_facts(
        who: Principal, items: Annotated[list[models.ObservationsIn], Field(min_length=1, max_length=batch)]
    ) -> PinResult:
        """Pin facts (exact texts): they lead every session's brief and the recalls that find them.
        At most 50."""
        return await services.pins.mark(who, items, pin=True)

    @tool(WRITE, ADDITIVE, title="Unpin facts", answer=partial(shown.marked, verb="Unpinned"))
    async def unpin_facts(
        who: Principal, items: Annotated[list[models.ObservationsIn], Field(min_length=1, max_length=batch)]
    ) -> PinResult:
        """Unpin facts (exact texts); they stay stored."""
        return await services.pins.mark(who, items, pin=False)
