"""The console's Hooks page: which episodes came from an assistant's hooks, by session (the
sessions, newest first, then one session's turns in order), and the hook settings to paste."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Annotated

from pydantic import BaseModel, ConfigDict, StringConstraints
from starlette.requests import Request
from starlette.responses import Response

from app.auth.principal import READ
from app.console.calls import parse
from app.console.hook_setups import hook_setups
from app.services.hook_models import SESSION_PATTERN, HookTurn

if TYPE_CHECKING:
    from app.console.console import Visit
    from app.console.kit import Kit
    from app.services.hooks import Hooks

LISTED = 500  # turns read for the sessions' listing


class SessionForm(BaseModel):
    model_config = ConfigDict(extra="ignore")

    session: Annotated[str, StringConstraints(pattern=SESSION_PATTERN)] | None = None


@dataclass(frozen=True, slots=True)
class SessionRow:
    session: str
    turns: int
    first: datetime
    last: datetime


def sessions(turns: list[HookTurn]) -> list[SessionRow]:
    """The sessions of these turns, the most recently active first."""
    by: dict[str, list[HookTurn]] = {}
    for t in turns:
        by.setdefault(t.session, []).append(t)
    rows = [SessionRow(s, len(ts), min(t.at for t in ts), max(t.at for t in ts)) for s, ts in by.items()]
    return sorted(rows, key=lambda r: r.last, reverse=True)


class HookPages:
    def __init__(self, kit: Kit, hooks: Hooks, base_url: str) -> None:
        self.c = kit
        self.hooks = hooks
        self.base_url = base_url

    async def show(self, request: Request, visit: Visit) -> Response:
        visit.require(READ)
        form = parse(SessionForm, {"session": v} if (v := request.query_params.get("session")) else {})
        turns = await self.c.run(visit.who, "hook_turns", self.hooks.turns, form.session, LISTED, writes=False)
        context = {
            "session": form.session,
            "turns": sorted(turns, key=lambda t: (t.turn, t.id)) if form.session else [],
            "sessions": [] if form.session else sessions(turns),
            "hook_setups": hook_setups(self.base_url),
        }
        return self.c.page(request, "hooks.html", context, visit)
