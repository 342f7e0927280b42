"""A stand-in for the Anthropic Messages API, for driving the real Claude Code offline.

Claude Code (`claude -p`, `ANTHROPIC_BASE_URL` pointing here) sends each turn to `POST /v1/messages`
and reads the answer as a stream of server-sent events. This server answers from a script — each
answer either text or a `tool_use` block the client then runs — and records every request body,
which is exactly what the model would have been given. Other endpoints the client may reach
(`count_tokens`, anything else) get a small sensible answer, so nothing in the client waits on them.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Text:
    """An answer in words, ending the turn."""

    text: str


@dataclass(frozen=True)
class ToolUse:
    """An answer that calls a tool (`mcp__engram__recall`, …) with `input`."""

    name: str
    input: dict[str, Any]


Answer = Text | ToolUse
Script = Callable[[dict[str, Any]], Answer]


@dataclass
class ModelAPI:
    """The running stand-in: its base URL, the requests it was sent, and what it answers next.

    `answers` are given out in order to the requests that carry tools (the conversation's turns;
    Claude Code's side requests — a title, a topic — carry none and get `Text("OK")`); once spent,
    each turn is answered `Text(default)`. `script`, when set, decides instead.
    """

    url: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    answers: list[Answer] = field(default_factory=list)
    default: str = "Done."
    script: Script | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def turns(self) -> list[dict[str, Any]]:
        """The recorded requests of the conversation itself (those that offered tools)."""
        with self.lock:
            return [r for r in self.requests if r.get("tools")]

    def reset(self, *answers: Answer) -> None:
        with self.lock:
            self.requests.clear()
            self.paths.clear()
            self.answers[:] = answers
            self.script = None

    def answer(self, body: dict[str, Any]) -> Answer:
        with self.lock:
            self.requests.append(body)
            if self.script is not None:
                return self.script(body)
            if not body.get("tools"):
                return Text("OK")
            return self.answers.pop(0) if self.answers else Text(self.default)


def events(body: dict[str, Any], answer: Answer) -> Iterator[tuple[str, dict[str, Any]]]:
    """The streamed events of one answer, as the Messages API sends them."""
    usage = {"input_tokens": 10, "output_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    message = {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "claude-sonnet-4-6"),
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    yield "message_start", {"type": "message_start", "message": message}
    if isinstance(answer, Text):
        block: dict[str, Any] = {"type": "text", "text": ""}
        delta = {"type": "text_delta", "text": answer.text}
        stop = "end_turn"
    else:
        block = {"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:24]}", "name": answer.name, "input": {}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(answer.input)}
        stop = "tool_use"
    yield "content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}
    yield "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}
    yield "content_block_stop", {"type": "content_block_stop", "index": 0}
    yield (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": 5},
        },
    )
    yield "message_stop", {"type": "message_stop"}


def handler(api: ModelAPI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            return

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_HEAD(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self) -> None:
            with api.lock:
                api.paths.append(f"GET {self.path}")
            self._send(200, {"data": [], "has_more": False})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b"{}"
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = {}
            path = self.path.split("?", 1)[0]
            with api.lock:
                api.paths.append(f"POST {path}")
            if path.endswith("/count_tokens"):
                self._send(200, {"input_tokens": 100})
            elif path.endswith("/v1/messages"):
                self._stream(body, api.answer(body))
            else:
                self._send(200, {})

        def _stream(self, body: dict[str, Any], answer: Answer) -> None:
            if not body.get("stream"):
                self._send(200, _whole(body, answer))
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            for name, data in events(body, answer):
                self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
            self.wfile.flush()
            self.close_connection = True

    return Handler


def _whole(body: dict[str, Any], answer: Answer) -> dict[str, Any]:
    """A non-streamed answer (the client asks so for some side requests)."""
    if isinstance(answer, Text):
        content: list[dict[str, Any]] = [{"type": "text", "text": answer.text}]
        stop = "end_turn"
    else:
        content = [
            {"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:24]}", "name": answer.name, "input": answer.input}
        ]
        stop = "tool_use"
    return {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "claude-sonnet-4-6"),
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }


@contextmanager
def model_api() -> Iterator[ModelAPI]:
    """The stand-in on a free loopback port, served from a thread for the block."""
    api = ModelAPI()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler(api))
    httpd.daemon_threads = True
    api.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield api
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)
