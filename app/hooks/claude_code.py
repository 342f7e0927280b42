"""Claude Code's hooks (`"type": "http"`, or a command posting with `curl`): its input, which of its
events asks what of the hooks service, and the JSON it reads back (docs/clients.md).

- SessionStart asks for a session's brief (`Start`); its `source` `clear` or `compact` says the
  client's history was emptied.
- UserPromptSubmit asks for the facts its prompt may need (`Prompt`) and keeps the prompt (`user`).
- Stop, SubagentStop, and PreCompact and SessionEnd when the input carries the assistant's last
  message (the local helper adds it), keep that message (`assistant`, `subagent-<agent type>`).
- Any other event asks nothing and keeps nothing (`{}`).

The answer: `{"hookSpecificOutput": {"hookEventName": …, "additionalContext": …}}` when there is
context to add. Every field is untrusted: bounded here, never a path anything opens, unknown fields
ignored (Claude Code adds fields from version to version).
"""

from __future__ import annotations

import re
from typing import Annotated

import orjson
from pydantic import BaseModel, ConfigDict, StringConstraints

from app.config import HOOK_EVENTS
from app.hooks.client import Client
from app.services.hook_models import SESSION_PATTERN, HookCall, Prompt, Said, Start
from app.services.models import Clean

PATH = "/hooks/claude-code"
# A prompt or an answer is bounded by the body's bytes (ENGRAM_HOOK_MAX_BYTES); what is kept of it
# is clipped to an episode's length, with a visible marker.
PROMPT_MAX_CHARS = 16 * 1024 * 1024
Short = Annotated[str, StringConstraints(max_length=200), Clean]
Path = Annotated[str, StringConstraints(max_length=4096), Clean]  # text only: never opened
Long = Annotated[str, StringConstraints(max_length=PROMPT_MAX_CHARS), Clean]
ENDS = ("Stop", "SubagentStop", "PreCompact", "SessionEnd")  # the events that may carry an answer


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


def name(event: HookInput) -> str:
    """The event's name in metrics and logs: `UserPromptSubmit` → `user_prompt_submit`."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", event.hook_event_name).lower()[:60]


def call(event: HookInput) -> HookCall:
    """What the event asks of the hooks service, and the turn it carries."""
    what, session = event.hook_event_name, event.session_id
    if what == "SessionStart":
        return HookCall(what, session, ask=Start(event.cwd, cleared=event.source in ("clear", "compact")))
    if what == "UserPromptSubmit" and (prompt := _text(event.prompt)):
        return HookCall(what, session, ask=Prompt(prompt), said=Said("user", prompt))
    if what in ENDS and (message := _text(event.last_assistant_message)):
        speaker = "assistant" if what != "SubagentStop" else f"subagent-{_slug(event.agent_type) or 'agent'}"
        return HookCall(what, session, said=Said(speaker, message))
    return HookCall(what, session)


def answer(event: HookInput, context: str) -> bytes:
    """The JSON Claude Code reads: additional context for the event."""
    return orjson.dumps({"hookSpecificOutput": {"hookEventName": event.hook_event_name, "additionalContext": context}})


def _text(text: str | None) -> str | None:
    """A text said, or None when there is none (missing, or blank)."""
    return text if text and text.strip() else None


def _slug(text: str | None) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", (text or "").lower()).strip("-")[:30]  # a source stays within 200


CLAUDE_CODE = Client(path=PATH, model=HookInput, events=HOOK_EVENTS, name=name, call=call, answer=answer)
