"""The settings people paste and the Claude Code plugin in clients/claude-code: each JSON parses and
has the fields Claude Code's documentation names (hooks reference: `type`, `url`, `headers`,
`allowedEnvVars`, `timeout`, `command`; plugins reference: `.claude-plugin/plugin.json` with a
kebab-case `name`, component paths starting `./`), and docs/clients.md quotes exactly what the
console offers."""

from __future__ import annotations

import json
import re
from typing import Any

from app.config import HOOK_EVENTS
from app.console.hook_setups import hooks_block
from tests.support.server import ROOT

PLUGIN = ROOT / "clients" / "claude-code"
DOC = ROOT / "docs" / "clients.md"
ENV_REF = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")
# Claude Code's hook events (code.claude.com/docs/en/hooks) that Engram's settings use.
DOCUMENTED_EVENTS = set(HOOK_EVENTS)
HELPER = 'python3 "${CLAUDE_PLUGIN_ROOT}/scripts/engram_hook.py"'


def _load(path: Any) -> Any:
    return json.loads(path.read_text())


def check_hooks(hooks: dict[str, Any], *, plugin: bool) -> None:
    assert set(hooks) <= DOCUMENTED_EVENTS, set(hooks) - DOCUMENTED_EVENTS
    for event, groups in hooks.items():
        assert isinstance(groups, list) and groups, event
        for group in groups:
            assert set(group) <= {"matcher", "hooks"}, group
            for hook in group["hooks"]:
                assert isinstance(hook["timeout"], int) and 1 <= hook["timeout"] <= 10, hook
                if hook["type"] == "http":
                    assert set(hook) <= {"type", "url", "headers", "allowedEnvVars", "timeout", "statusMessage"}
                    assert hook["url"].endswith("/hooks/claude-code"), hook
                    assert hook["headers"] == {"Authorization": "Bearer $ENGRAM_API_KEY"}
                    used = {m for v in hook["headers"].values() for m in ENV_REF.findall(v)}
                    # Claude Code fills a variable allowedEnvVars does not list with an empty string.
                    assert used <= set(hook["allowedEnvVars"]), (used, hook["allowedEnvVars"])
                    assert not plugin  # an http hook's url takes no variable: the plugin posts by command
                elif plugin:
                    assert hook == {"type": "command", "command": HELPER, "timeout": hook["timeout"]}, hook
                else:  # the pasted settings' SessionStart, which runs commands only
                    assert event == "SessionStart" and hook["type"] == "command", hook
                    assert hook["command"].startswith("curl ") and "$ENGRAM_API_KEY" in hook["command"]


def test_the_plugin_is_as_documented() -> None:
    manifest = _load(PLUGIN / ".claude-plugin" / "plugin.json")
    assert re.fullmatch(r"[a-z][a-z0-9]*(-[a-z0-9]+)*", manifest["name"])
    assert re.fullmatch(r"\d+\.\d+\.\d+", manifest["version"]) and manifest["description"]
    # hooks/hooks.json loads by itself: naming it in the manifest is refused as a duplicate.
    assert "hooks" not in manifest
    path = manifest["mcpServers"]
    assert path.startswith("./") and (PLUGIN / path).is_file(), path
    hooks = _load(PLUGIN / "hooks" / "hooks.json")
    assert set(hooks) <= {"description", "hooks"}  # the plugin form wraps the events in `hooks`
    check_hooks(hooks["hooks"], plugin=True)
    assert set(hooks["hooks"]) == DOCUMENTED_EVENTS  # every event Engram answers
    servers = _load(PLUGIN / manifest["mcpServers"])["mcpServers"]
    assert servers == {
        "engram": {
            "type": "http",
            "url": "${ENGRAM_URL}/mcp",
            "headers": {"Authorization": "Bearer ${ENGRAM_API_KEY}"},
        }
    }
    assert (PLUGIN / "scripts" / "engram_hook.py").is_file()


def test_the_settings_in_the_docs_are_the_consoles_and_parse() -> None:
    blocks = re.findall(r"```json\n(.*?)```", DOC.read_text(), re.S)
    parsed = [json.loads(b) for b in blocks]
    assert parsed[0] == hooks_block("https://engram.example.com")
    check_hooks(parsed[0]["hooks"], plugin=False)
    assert set(parsed[0]["hooks"]) == {"SessionStart", "UserPromptSubmit", "Stop", "SubagentStop"}
    assert all(isinstance(p, dict) for p in parsed)
