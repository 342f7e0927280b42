"""The settings each assistant is given to connect to this server, generated from the server's own
MCP addresses: the text a person pastes, the one-click install links of Cursor and VS Code (which
carry the same configuration), and a warning where a client could not reach the address. The
Connect page and a new API key's page show them (docs/console.md, "Connect"); docs/clients.md
quotes the Codex block that `codex_toml` writes."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

from app.config import is_loopback_host

SERVER = "engram"  # the name each client's settings give this server
KEY_VARIABLE = "ENGRAM_TOKEN"  # where Codex reads the API key it sends (never in its config file)
# The hosts mcp-remote lets through over plain http without --allow-http (its own check: the
# hostname is exactly one of these; 127.0.0.2 or [::1] need the flag although they are loopback).
_MCP_REMOTE_PLAIN_HTTP = {"localhost", "127.0.0.1"}
# encodeURIComponent's unescaped characters, which VS Code's own example uses to build its link.
_URI_COMPONENT_SAFE = "-_.!~*'()"


@dataclass(frozen=True, slots=True)
class Setup:
    """One assistant's settings: where they go, the text to paste, and optionally a link that
    installs the same configuration and a warning to read first."""

    id: str
    name: str
    where: str
    text: str
    install: str | None = None
    install_label: str = ""
    warning: str | None = None


def is_loopback(url: str) -> bool:
    """Whether `url`'s host is this machine only (127.0.0.0/8, ::1, localhost)."""
    host = urlsplit(url).hostname or ""
    return is_loopback_host(host)


def _json(settings: dict[str, object]) -> str:
    return json.dumps(settings, indent=2, ensure_ascii=False)


def vscode_server(url: str) -> dict[str, object]:
    """VS Code's entry for this server, as in .vscode/mcp.json's `servers`."""
    return {"type": "http", "url": url}


def cursor_server(url: str) -> dict[str, object]:
    """Cursor's entry for this server, as in mcp.json's `mcpServers`."""
    return {"url": url}


def vscode_install_link(url: str) -> str:
    """VS Code's MCP URL handler: `vscode:mcp/install?` and the URI-encoded JSON of the object
    `code --add-mcp` takes (the server's entry with its `name`)."""
    server = json.dumps({"name": SERVER, **vscode_server(url)}, separators=(",", ":"))
    return f"vscode:mcp/install?{quote(server, safe=_URI_COMPONENT_SAFE)}"


def cursor_install_link(url: str) -> str:
    """Cursor's install deeplink: the server's name, and its mcp.json entry as base64 JSON
    (percent-encoded, so `+`, `/` and `=` survive the query string)."""
    config = base64.b64encode(json.dumps(cursor_server(url), separators=(",", ":")).encode()).decode()
    return f"cursor://anysphere.cursor-deeplink/mcp/install?name={SERVER}&config={quote(config, safe='')}"


def _toml_string(value: str) -> str:
    """A TOML basic string: JSON's escapes (\\", \\\\, \\n, \\uXXXX) are TOML's too."""
    return json.dumps(value, ensure_ascii=False)


def codex_toml(url: str) -> str:
    """Codex CLI's block for ~/.codex/config.toml: the address, and the environment variable that
    holds the API key it sends as a bearer token."""
    return f"[mcp_servers.{SERVER}]\nurl = {_toml_string(url)}\nbearer_token_env_var = {_toml_string(KEY_VARIABLE)}"


def claude_desktop_json(url: str) -> str:
    """Claude Desktop's claude_desktop_config.json entry: mcp-remote, a local stdio bridge that signs
    in through the browser, so it reaches a server on this machine as well as a remote one."""
    args = ["-y", "mcp-remote", url]
    if urlsplit(url).scheme == "http" and urlsplit(url).hostname not in _MCP_REMOTE_PLAIN_HTTP:
        args.append("--allow-http")  # mcp-remote refuses other plain-http addresses without it
    return _json({"mcpServers": {SERVER: {"command": "npx", "args": args}}})


def _unreachable(url: str, client: str, company: str) -> str | None:
    """Why a client that connects from its maker's servers cannot use a loopback address."""
    if not is_loopback(url):
        return None
    return (
        f"{url} is a loopback address: {client} connects from {company}'s servers on the internet, which cannot "
        "reach it. Serve Engram at a public HTTPS address (behind an ingress, a reverse proxy or a tunnel) and set "
        "ENGRAM_PUBLIC_URL to it; on this computer, Claude Desktop (through mcp-remote) works as it is."
    )


def setups(endpoints: dict[str, str]) -> list[Setup]:
    """Each assistant's settings for these endpoints. Clients that speak MCP's OAuth need only the
    URL: they sign in through this server's pages and ask which tenant to use."""
    native = endpoints.get("native", next(iter(endpoints.values()), ""))
    chatgpt = endpoints.get("chatgpt", native)
    return [
        Setup("claude-code", "Claude Code", "in a terminal (then /mcp in Claude Code to sign in)",
              f"claude mcp add --transport http {SERVER} {native}"),
        Setup("vscode", "VS Code", ".vscode/mcp.json in your project (or MCP: Add Server…)",
              _json({"servers": {SERVER: vscode_server(native)}}),
              vscode_install_link(native), "Install in VS Code"),
        Setup("cursor", "Cursor", "~/.cursor/mcp.json (or .cursor/mcp.json in a project)",
              _json({"mcpServers": {SERVER: cursor_server(native)}}),
              cursor_install_link(native), "Install in Cursor"),
        Setup("codex", "Codex CLI",
              f"~/.codex/config.toml; {KEY_VARIABLE} in your shell holds an API key of this tenant (below)",
              codex_toml(native)),
        Setup("claude-desktop", "Claude Desktop",
              "claude_desktop_config.json (Settings → Developer → Edit Config), then restart Claude Desktop; "
              "needs Node.js 18 or later, and signs you in in the browser",
              claude_desktop_json(native)),
        Setup("claude-ai", "claude.ai", "Settings → Connectors → Add custom connector: name Engram, this URL",
              native, warning=_unreachable(native, "claude.ai", "Anthropic")),
        Setup("chatgpt", "ChatGPT",
              "Settings → Connectors → Advanced → Developer mode, Create: this URL, authentication OAuth", chatgpt,
              warning=_unreachable(chatgpt, "ChatGPT", "OpenAI")),
    ]  # fmt: skip


def agent_setups(endpoint: str, key: str) -> list[Setup]:
    """A headless agent's settings with an API key (`key`: the secret, or a placeholder)."""
    header = f"Authorization: Bearer {key}"
    return [
        Setup("agent-claude-code", "Claude Code, headless", "in a terminal",
              f'claude mcp add --transport http {SERVER} {endpoint} --header "{header}"'),
        Setup("agent-json", "Any MCP client", "its server settings (JSON)",
              _json({"mcpServers": {SERVER: {"type": "http", "url": endpoint,
                                             "headers": {"Authorization": f"Bearer {key}"}}}})),
        Setup("agent-curl", "Check it", "a shell: lists the tools",
              f"curl -s {endpoint} -H '{header}' -H 'Content-Type: application/json' "
              "-H 'Accept: application/json, text/event-stream' "
              """-d '{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}'"""),
    ]  # fmt: skip
