#!/usr/bin/env python3
"""Engram's hook as a command: for the events Claude Code runs only as commands (SessionStart), for
a hook whose server address comes from the environment (an http hook's url cannot), and for what
an http hook cannot do: read the transcript on this disk.

Claude Code runs it with the hook input on standard input. It adds the assistant's last message
from the session's transcript (a JSONL file only this machine has) when the input carries none
(PreCompact, SessionEnd), posts the input to <server>/hooks/claude-code with $ENGRAM_API_KEY (the
server: the first argument if given, as the console's downloaded plugin writes it, else
$ENGRAM_URL), and prints the server's answer for Claude Code to read. It never blocks the
session: any failure prints nothing and exits 0. Standard library only (docs/clients.md, "What a server cannot do").
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import urllib.request

MAX_INPUT = 1024 * 1024  # bytes of hook input read
TAIL = 2 * 1024 * 1024  # bytes of the transcript read, from its end
TIMEOUT = 3.0  # seconds for the server to answer


def last_assistant_message(transcript: str) -> str | None:
    """The text of the last assistant entry of a Claude Code transcript (JSONL), or None."""
    try:
        with open(transcript, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - TAIL))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        message = entry.get("message") if isinstance(entry, dict) else None
        if entry.get("type") != "assistant" or not isinstance(message, dict):
            continue
        content = message.get("content")
        parts = (
            [content]
            if isinstance(content, str)
            else [c.get("text", "") for c in content or [] if isinstance(c, dict) and c.get("type") == "text"]
        )
        text = "\n".join(p for p in parts if p).strip()
        if text:
            return text
    return None


def main() -> None:
    url = (sys.argv[1] if len(sys.argv) > 1 else os.environ.get("ENGRAM_URL", "")).rstrip("/")
    key = os.environ.get("ENGRAM_API_KEY", "")
    if not url.startswith(("https://", "http://")) or not key:
        return
    event = json.loads(sys.stdin.buffer.read(MAX_INPUT) or b"{}")
    if not isinstance(event, dict):
        return
    transcript = event.get("transcript_path")
    if not event.get("last_assistant_message") and isinstance(transcript, str) and transcript:
        said = last_assistant_message(os.path.expanduser(transcript))
        if said:
            event["last_assistant_message"] = said
    request = urllib.request.Request(  # noqa: S310 (http or https, checked above)
        f"{url}/hooks/claude-code",
        data=json.dumps(event).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=TIMEOUT) as response:  # noqa: S310 (the configured server)
        body = response.read(MAX_INPUT)
    if body.strip() not in (b"", b"{}"):
        sys.stdout.write(body.decode())


if __name__ == "__main__":
    with contextlib.suppress(Exception):  # memory never blocks the session
        main()
    sys.exit(0)
