"""Claude Code's hook settings to paste, for the Connect page (`{% include "hook_setups.html" %}`
with `hook_setups` in its context) and docs/clients.md, which quotes them (a test keeps the two
the same). The hooks post to this server's /hooks/claude-code with an API key taken from the
environment (`ENGRAM_API_KEY`), so the settings file holds no secret."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

# Seconds Claude Code waits for each event's answer; the server answers within its own deadline
# (ENGRAM_HOOK_DEADLINE_SECONDS, 0.8 s) whatever happens, so these are only a backstop.
TIMEOUTS = {"SessionStart": 5, "UserPromptSubmit": 3, "Stop": 3, "SubagentStop": 3}


@dataclass(frozen=True, slots=True)
class HookSetup:
    """One place settings go, and the text to paste there."""

    id: str
    name: str
    where: str
    text: str


def hooks_block(base_url: str) -> dict[str, Any]:
    """The `hooks` block of Claude Code's settings: each event an http hook to this server."""

    def hook(event: str) -> dict[str, Any]:
        return {
            "type": "http",
            "url": f"{base_url.rstrip('/')}/hooks/claude-code",
            "headers": {"Authorization": "Bearer $ENGRAM_API_KEY"},
            "allowedEnvVars": ["ENGRAM_API_KEY"],
            "timeout": TIMEOUTS[event],
        }

    return {"hooks": {event: [{"hooks": [hook(event)]}] for event in TIMEOUTS}}


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
