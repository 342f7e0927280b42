"""The shapes the hooks service speaks: what a client's event asks of it (`HookCall`, made by that
client's adapter in app/hooks/), the tenant's hook settings, and what a hook gets back. No client's
event names or input fields are spelled here: each adapter maps its own onto these."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from app.services.recall_models import Episode, Fact

# Claude Code's session ids are UUIDs; other clients' are opaque words. Nothing else is a session.
SESSION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"


class Start(NamedTuple):
    """A session starts: the working directory it names (text, never opened: its last part names the
    project) and whether the client's history was emptied (what it was given is given again)."""

    directory: str | None
    cleared: bool


class Prompt(NamedTuple):
    """A prompt, to recall for (not blank)."""

    text: str


class Said(NamedTuple):
    """A turn to keep as an episode: who said it (`user`, `assistant`, `subagent-<type>`) and what
    (not blank)."""

    speaker: str
    text: str


@dataclass(frozen=True)
class HookCall:
    """One client event in the service's words. `event` is the client's own name for it, which the
    tenant's `events` setting lists when it is answered; `ask` is what the answer may bring (a
    session's brief, a prompt's facts), `said` the turn it carries to keep."""

    event: str
    session: str
    ask: Start | Prompt | None = None
    said: Said | None = None


class HookPolicy(BaseModel):
    """What hooks do for one tenant: the server's defaults with the tenant's own settings."""

    model_config = ConfigDict(frozen=True)

    capture: bool
    events: frozenset[str]  # the client event names answered (`HookCall.event`): Claude Code's today
    deny: tuple[str, ...] = ()
    prompt_tokens: int = Field(ge=0)
    start_tokens: int = Field(ge=0)
    min_score: float = Field(ge=0, le=1)
    private: bool = True  # captured turns go to the posting principal's private memory (False: shared)


class Brief(BaseModel):
    """What a hook injects: recent episodes (a session's start) and facts, best first."""

    heading: str
    pinned: list[Fact] = Field(default_factory=list, description="The tenant's pinned facts: they lead.")
    episodes: list[Episode] = Field(default_factory=list)
    facts: list[Fact] = Field(default_factory=list)
    facts_heading: str | None = None

    @property
    def empty(self) -> bool:
        return not self.pinned and not self.episodes and not self.facts


class HookOutcome(BaseModel):
    """One event's outcome: what to inject (if anything) and how many turns it kept."""

    brief: Brief | None = None
    kept: int = 0
    redacted: int = 0


class HookTurn(BaseModel):
    """A turn a hook kept: its episode, session, place in the session and speaker."""

    id: int
    session: str
    turn: int
    speaker: str
    text: str
    at: datetime
