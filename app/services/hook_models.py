"""The shapes of an assistant's hook input (Claude Code's documented fields) and of what a hook
gets back. Every field is untrusted: bounded here, never a path anything opens, unknown fields
ignored (clients add fields from version to version)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from app.services.models import Clean
from app.services.recall_models import Episode, Fact

# Claude Code's session ids are UUIDs; other clients' are opaque words. Nothing else is a session.
SESSION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
# A prompt or an answer is bounded by the body's bytes (ENGRAM_HOOK_MAX_BYTES); what is kept of it
# is clipped to an episode's length, with a visible marker.
PROMPT_MAX_CHARS = 16 * 1024 * 1024
Short = Annotated[str, StringConstraints(max_length=200), Clean]
Path = Annotated[str, StringConstraints(max_length=4096), Clean]  # text only: never opened
Long = Annotated[str, StringConstraints(max_length=PROMPT_MAX_CHARS), Clean]


class HookInput(BaseModel):
    """One hook event as Claude Code posts it (code.claude.com/docs/en/hooks, "Hook input")."""

    model_config = ConfigDict(extra="ignore", str_strip_whitespace=False)

    hook_event_name: Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z]+$")]
    session_id: Annotated[str, StringConstraints(pattern=SESSION_PATTERN)]
    transcript_path: Path | None = None
    cwd: Path | None = None
    permission_mode: Short | None = None
    # UserPromptSubmit
    prompt: Long | None = None
    # SessionStart: startup, resume, clear, compact
    source: Short | None = None
    model: Short | None = None
    # Stop, SubagentStop (and, from the local helper, PreCompact and SessionEnd)
    stop_hook_active: bool | None = None
    last_assistant_message: Long | None = None
    agent_id: Short | None = None
    agent_type: Short | None = None
    # PreCompact: manual, auto; SessionEnd: clear, logout, prompt_input_exit, other, ...
    trigger: Short | None = None
    custom_instructions: Long | None = None
    reason: Short | None = None


class HookPolicy(BaseModel):
    """What hooks do for one tenant: the server's defaults with the tenant's own settings."""

    model_config = ConfigDict(frozen=True)

    capture: bool
    events: frozenset[str]
    deny: tuple[str, ...] = ()
    prompt_tokens: int = Field(ge=0)
    start_tokens: int = Field(ge=0)
    min_score: float = Field(ge=0, le=1)
    private: bool = True  # captured turns go to the posting principal's private memory (False: shared)


class Brief(BaseModel):
    """What a hook injects: recent episodes (a session's start) and facts, best first."""

    heading: str
    episodes: list[Episode] = Field(default_factory=list)
    facts: list[Fact] = Field(default_factory=list)
    facts_heading: str | None = None

    @property
    def empty(self) -> bool:
        return not self.episodes and not self.facts


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
