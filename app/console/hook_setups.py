"""Claude Code's hook settings to paste, for the Connect page (`{% include "hook_setups.html" %}`
with `hook_setups` in its context) and docs/clients.md, which quotes them (a test keeps the two
the same, and tests/test_claude_code.py runs them in the real client). The hooks post to this
server's /hooks/claude-code with an API key taken from the environment (`ENGRAM_API_KEY`), so the
settings file holds no secret.

Claude Code validates a hook's `url` as a URL when settings load (no `${VAR}` there: it expands
variables only in header values that `allowedEnvVars` lists) and runs no http hook at SessionStart,
so the address is written in literally and SessionStart posts through a command (`curl`)."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any

PATH = "/hooks/claude-code"
# Seconds Claude Code waits for each event's answer; the server answers within its own deadline
# (ENGRAM_HOOK_DEADLINE_SECONDS, 0.8 s) whatever happens, so these are only a backstop.
TIMEOUTS = {"SessionStart": 5, "UserPromptSubmit": 3, "Stop": 3, "SubagentStop": 3, "PreCompact": 5, "SessionEnd": 5}
# The events an http hook serves: the input carries all the server needs (PreCompact and SessionEnd
# need the local transcript, SessionStart runs commands only).
HTTP_EVENTS = ("UserPromptSubmit", "Stop", "SubagentStop")


@dataclass(frozen=True, slots=True)
class HookSetup:
    """One place settings go, and the text to paste there."""

    id: str
    name: str
    where: str
    text: str


def hook_url(base_url: str) -> str:
    return f"{base_url.rstrip('/')}{PATH}"


def http_hook(base_url: str, event: str) -> dict[str, Any]:
    """An http hook posting `event` to this server, the key from the environment."""
    return {
        "type": "http",
        "url": hook_url(base_url),
        "headers": {"Authorization": "Bearer $ENGRAM_API_KEY"},
        "allowedEnvVars": ["ENGRAM_API_KEY"],
        "timeout": TIMEOUTS[event],
    }


def command_hook(command: str, event: str) -> dict[str, Any]:
    return {"type": "command", "command": command, "timeout": TIMEOUTS[event]}


def curl_command(base_url: str) -> str:
    """A command that posts the hook's input (standard input) and prints the answer; on any failure
    it prints nothing and succeeds, so memory never blocks a session."""
    return (
        'curl -sf --max-time 4 -H "Authorization: Bearer $ENGRAM_API_KEY" -H "Content-Type: application/json" '
        f"--data-binary @- {shlex.quote(hook_url(base_url))} || true"
    )


def hooks_block(base_url: str) -> dict[str, Any]:
    """The `hooks` block of Claude Code's settings: SessionStart through `curl`, the events whose
    input says all an http hook to this server."""
    hooks = {"SessionStart": command_hook(curl_command(base_url), "SessionStart")}
    hooks |= {event: http_hook(base_url, event) for event in HTTP_EVENTS}
    return {"hooks": {event: [{"hooks": [hook]}] for event, hook in hooks.items()}}


def hook_setups(base_url: str) -> list[HookSetup]:
    text = json.dumps(hooks_block(base_url), indent=2)
    return [
        HookSetup("hooks-user", "Every project (your own settings)", "~/.claude/settings.json, merged into it", text),
        HookSetup("hooks-project", "One project (shared with its team)", ".claude/settings.json in the project", text),
        HookSetup(
            "hooks-key",
            "The key the hooks send",
            "your shell's profile: an API key of this tenant (Administer → API keys), never in the file",
            "export ENGRAM_API_KEY=egk_…",
        ),
    ]
