"""The settings the Connect page gives each assistant (app/console/client_setups.py), for a server
on this machine and for one behind a public HTTPS address: Codex's block is TOML with the keys Codex
reads, the install links carry the configuration the page shows, Claude Desktop's mcp-remote line has
--allow-http exactly where mcp-remote asks for it, and the warning for claude.ai and ChatGPT appears
for a loopback address only."""

from __future__ import annotations

import json
import tomllib

import pytest

from app.config import ENDPOINT_PATHS
from app.console.client_setups import (
    claude_desktop_json,
    codex_toml,
    cursor_install_link,
    is_loopback,
    setups,
    vscode_install_link,
)
from tests.support.install_links import decode_cursor, decode_vscode

LOCAL = "http://127.0.0.1:8000"
PUBLIC = "https://memory.example.com"


def endpoints(base: str) -> dict[str, str]:
    return {name: f"{base}{path}" for name, path in ENDPOINT_PATHS.items()}


def by_id(base: str) -> dict[str, object]:
    return {s.id: s for s in setups(endpoints(base))}


@pytest.mark.parametrize("base", [LOCAL, PUBLIC, "http://[::1]:8000"])
def test_codex_block_is_toml_with_the_keys_codex_reads(base):
    block = by_id(base)["codex"].text
    assert block == codex_toml(f"{base}/mcp")
    assert tomllib.loads(block) == {
        "mcp_servers": {"engram": {"url": f"{base}/mcp", "bearer_token_env_var": "ENGRAM_TOKEN"}}
    }
    # A URL with characters TOML escapes still reads back as itself.
    odd = 'https://memory.example.com/a"b\\c/mcp'
    assert tomllib.loads(codex_toml(odd))["mcp_servers"]["engram"]["url"] == odd


@pytest.mark.parametrize("base", [LOCAL, PUBLIC])
def test_install_links_carry_the_configuration_the_page_shows(base):
    shown = by_id(base)
    vscode = json.loads(shown["vscode"].text)["servers"]["engram"]
    assert decode_vscode(shown["vscode"].install) == {"name": "engram", **vscode}
    assert vscode == {"type": "http", "url": f"{base}/mcp"}
    name, cursor = decode_cursor(shown["cursor"].install)
    assert name == "engram" and cursor == json.loads(shown["cursor"].text)["mcpServers"]["engram"]
    assert shown["vscode"].install == vscode_install_link(f"{base}/mcp")
    assert shown["cursor"].install == cursor_install_link(f"{base}/mcp")
    # The others have no link to follow.
    assert [s.id for s in shown.values() if s.install] == ["vscode", "cursor"]


def test_a_base64_config_with_plus_slash_and_padding_survives_the_query():
    # URLs whose base64 holds "+", "/" and "=": each is percent-encoded, so the query decodes back.
    for url, held in (("https://m.example.com/~~~", "%2B"), ("https://m.example.com/~>?/mcp", "%2F"),
                      ("https://é.example.com/mcp", "%3D")):  # fmt: skip
        assert held in cursor_install_link(url)
        assert decode_cursor(cursor_install_link(url)) == ("engram", {"url": url})
        assert decode_vscode(vscode_install_link(url))["url"] == url


@pytest.mark.parametrize(
    ("url", "args"),
    [
        ("http://127.0.0.1:8000/mcp", ["-y", "mcp-remote", "http://127.0.0.1:8000/mcp"]),
        ("http://localhost:8000/mcp", ["-y", "mcp-remote", "http://localhost:8000/mcp"]),
        # Loopback too, but mcp-remote lets only localhost and 127.0.0.1 through over http.
        ("http://127.0.0.2:8000/mcp", ["-y", "mcp-remote", "http://127.0.0.2:8000/mcp", "--allow-http"]),
        ("http://[::1]:8000/mcp", ["-y", "mcp-remote", "http://[::1]:8000/mcp", "--allow-http"]),
        ("http://10.0.0.5/mcp", ["-y", "mcp-remote", "http://10.0.0.5/mcp", "--allow-http"]),
        ("https://memory.example.com/mcp", ["-y", "mcp-remote", "https://memory.example.com/mcp"]),
    ],
)
def test_claude_desktop_runs_mcp_remote(url, args):
    assert json.loads(claude_desktop_json(url)) == {"mcpServers": {"engram": {"command": "npx", "args": args}}}


def test_loopback_addresses():
    for url in (LOCAL, "http://localhost:9/mcp", "http://127.1.2.3/mcp", "http://[::1]:8000/mcp"):
        assert is_loopback(url), url
    for url in (PUBLIC, "http://10.0.0.5/mcp", "http://localhost.example.com/mcp", "http://[::2]/mcp"):
        assert not is_loopback(url), url


def test_claude_ai_and_chatgpt_are_warned_of_a_loopback_address_only():
    local = by_id(LOCAL)
    for client, company in (("claude-ai", "Anthropic"), ("chatgpt", "OpenAI")):
        warning = local[client].warning
        assert warning is not None and f"from {company}'s servers on the internet" in warning
        assert "public HTTPS address" in warning and "ENGRAM_PUBLIC_URL" in warning
    assert [s.id for s in local.values() if s.warning] == ["claude-ai", "chatgpt"]
    assert not [s.id for s in by_id(PUBLIC).values() if s.warning]
