"""`GET /console/connect/plugin.zip`: the Claude Code plugin of clients/claude-code with this
server's address written in, for a signed-in person to download and load (`claude --plugin-dir
engram-memory.zip`, or unzipped). The address cannot come from the environment in an http hook's
`url` (Claude Code validates it as a URL), so the archive holds it literally: http hooks for the
events whose input says all (UserPromptSubmit, Stop, SubagentStop), the standard-library helper
with the address as its argument for those that run commands only or need the local transcript
(SessionStart, PreCompact, SessionEnd). The key stays in the environment (`ENGRAM_API_KEY`).

The manifest and the helper are the repository plugin's own files, which the wheel carries
(`claude_plugin` here links to clients/claude-code in a checkout)."""

from __future__ import annotations

import io
import json
import shlex
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from starlette.responses import Response

from app.console.hook_setups import HTTP_EVENTS, TIMEOUTS, command_hook, http_hook

if TYPE_CHECKING:
    from starlette.requests import Request

    from app.console.kit import Visit

PLUGIN = Path(__file__).parent / "claude_plugin"
TOP = "engram-memory"  # the archive's one folder, the plugin's name
COPIED = (".claude-plugin/plugin.json", "scripts/engram_hook.py")
HELPER = 'python3 "${CLAUDE_PLUGIN_ROOT}/scripts/engram_hook.py"'


def plugin_hooks(base_url: str) -> dict[str, Any]:
    """hooks/hooks.json of the downloaded plugin: every event, this server's address literal."""
    command = f"{HELPER} {shlex.quote(base_url.rstrip('/'))}"
    hooks = {
        event: http_hook(base_url, event) if event in HTTP_EVENTS else command_hook(command, event)
        for event in TIMEOUTS
    }
    return {
        "description": f"Engram at {base_url}: a brief at each session's start, memory recalled for each prompt, "
        "each turn kept as an episode (the key from ENGRAM_API_KEY).",
        "hooks": {event: [{"hooks": [hook]}] for event, hook in hooks.items()},
    }


def mcp_servers(mcp_url: str) -> dict[str, Any]:
    """.mcp.json of the downloaded plugin: this server's MCP endpoint, the key from the environment."""
    engram = {"type": "http", "url": mcp_url, "headers": {"Authorization": "Bearer ${ENGRAM_API_KEY}"}}
    return {"mcpServers": {"engram": engram}}


def archive(base_url: str, mcp_url: str) -> bytes:
    """The plugin as a zip with one folder, `engram-memory/`."""
    made = {
        "hooks/hooks.json": plugin_hooks(base_url),
        ".mcp.json": mcp_servers(mcp_url),
    }
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name in COPIED:
            z.writestr(f"{TOP}/{name}", (PLUGIN / name).read_bytes())
        for name, content in made.items():
            z.writestr(f"{TOP}/{name}", json.dumps(content, indent=2) + "\n")
    return out.getvalue()


class PluginDownload:
    """The console's download of the plugin (any signed-in person: it holds no secret)."""

    def __init__(self, base_url: str, mcp_url: str) -> None:
        self.base_url = base_url
        self.mcp_url = mcp_url

    async def download(self, request: Request, visit: Visit) -> Response:
        return Response(
            archive(self.base_url, self.mcp_url),
            media_type="application/zip",
            headers={"Content-Disposition": f'attachment; filename="{TOP}.zip"', "Cache-Control": "no-store"},
        )
