"""The pinned facts page: the tenant's core memory (docs/pinned-facts.md), every pin with its entity,
who pinned it and when, and an Unpin form (posted with the session's CSRF token) for writers."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from app.auth.principal import READ, WRITE
from app.console.calls import parse
from app.services import models
from app.services.filters import moment
from app.services.pins import MAX_PINNED

if TYPE_CHECKING:
    from app.console.kit import Kit, Visit
    from app.services.pins import Pins

PATH = "/console/pinned"  # the console is served under /console (console.py)


class PinnedPage:
    def __init__(self, kit: Kit, pins: Pins) -> None:
        self.c = kit
        self.pins = pins

    async def show(self, request: Request, visit: Visit) -> Response:
        """Every pin on a live entity, ended facts too (they still count against the bound)."""
        visit.require(READ)
        listed = await self.c.run(visit.who, "pinned_facts", self.pins.listing, moment(None, True), writes=False)
        now = datetime.now(UTC)
        ended = {p.observation_id for p in listed if p.record.valid_until is not None and p.record.valid_until <= now}
        context = {"pins": listed, "ended": ended, "max_pinned": MAX_PINNED}
        return self.c.page(request, "pinned.html", context, visit)

    async def unpin(self, request: Request, visit: Visit) -> Response:
        visit.require(WRITE)
        f = await self.c.form(request, visit)
        item = parse(models.ObservationsIn, {"entity": f.get("entity", ""), "observations": [f.get("observation", "")]})
        result = await self.c.run(visit.who, "unpin_facts", self.pins.mark, [item], pin=False, writes=True)
        message = "Fact unpinned." if result.changed else "That fact was not pinned."
        return self.c.done(visit, PATH, message)
