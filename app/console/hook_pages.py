"""The console's Hooks page: which episodes came from an assistant's hooks, by session (the
sessions, newest first, then one session's turns in order), and the hook settings to paste."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator
from starlette.requests import Request
from starlette.responses import Response

from app.auth.principal import ADMIN, READ
from app.config import HOOK_EVENTS
from app.console.calls import parse
from app.console.hook_setups import hook_setups
from app.services.hook_models import SESSION_PATTERN, HookTurn
from app.services.redaction import check_patterns

if TYPE_CHECKING:
    from app.console.kit import Kit, Visit
    from app.services.hooks import Hooks

PATH = "/console/hooks"
LISTED = 500  # turns read for the sessions' listing


class SessionForm(BaseModel):
    model_config = ConfigDict(extra="ignore")

    session: Annotated[str, StringConstraints(pattern=SESSION_PATTERN)] | None = None


class SettingsForm(BaseModel):
    """The tenant's hook settings as its administrators post them (each event a checkbox, the
    deny-list one glob per line); every one is set (the form shows them all)."""

    model_config = ConfigDict(extra="ignore")

    capture: bool = False
    private: bool = False
    events: list[str]
    deny: Annotated[str, StringConstraints(max_length=20_000)] = ""
    prompt_tokens: int = Field(ge=0, le=20_000)
    start_tokens: int = Field(ge=0, le=20_000)
    min_score: float = Field(ge=0, le=1)

    @field_validator("deny")
    @classmethod
    def _globs(cls, value: str) -> str:
        check_patterns([line.strip() for line in value.splitlines() if line.strip()])
        return value

    @classmethod
    def posted(cls, fields: dict[str, str]) -> SettingsForm:
        data: dict[str, object] = {k: v for k, v in fields.items() if k in cls.model_fields and k != "events"}
        data["events"] = [e for e in HOOK_EVENTS if fields.get(f"event_{e}") == "on"]
        data["capture"] = fields.get("capture") == "on"
        data["private"] = fields.get("private") == "on"
        return parse(cls, data)

    def values(self) -> dict[str, object]:
        return {
            "capture": self.capture,
            "private": self.private,
            "events": self.events,
            "deny": [line.strip() for line in self.deny.splitlines() if line.strip()],
            "prompt_tokens": self.prompt_tokens,
            "start_tokens": self.start_tokens,
            "min_score": self.min_score,
        }


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
        policy = await self.c.run(visit.who, "hook_settings", self.hooks.policy, writes=False)
        context = {
            "policy": policy,
            "events": HOOK_EVENTS,
            "session": form.session,
            "turns": sorted(turns, key=lambda t: (t.turn, t.id)) if form.session else [],
            "sessions": [] if form.session else sessions(turns),
            "hook_setups": hook_setups(self.base_url),
        }
        return self.c.page(request, "hooks.html", context, visit)

    async def save(self, request: Request, visit: Visit) -> Response:
        """The tenant's hook settings, changed by one of its administrators."""
        visit.require(ADMIN)
        form = SettingsForm.posted(await self.c.form(request, visit))
        await self.c.run(visit.who, "hook_settings", self.hooks.change, form.values(), writes=True)
        return self.c.done(visit, PATH, "Hook settings saved.")
