"""A stand-in for OpenAI's Responses API (`POST /v1/responses`), for a real client such as Codex CLI
run against it: it records each request body — exactly what a model would have been given — and
answers with the streamed events the client parses, scripted by the test.

The events and their fields are those Codex's own parser reads (codex-rs/codex-api/src/sse/
responses.rs, and the fixtures of its test suite): `response.created` with a `response` holding an
`id`; `response.output_item.added` and `response.output_text.delta` while a message streams;
`response.output_item.done` with the whole item (a `message` of `output_text`, or a `function_call`
with `call_id`, `name`, `arguments` as a JSON string and, for a tool the client sent inside a
namespace, that `namespace`); then `response.completed` with the `id` and `usage`. A stream that
ends without `response.completed` is a failed turn to the client.
"""

from __future__ import annotations

import itertools
import json
from collections import deque
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from tests.support.local_http import ThreadedServer
from tests.support.server import free_port


@dataclass
class Turn:
    """One scripted answer: a call of `tool` with `arguments`, or else the message `text`."""

    text: str = "Done."
    tool: str | None = None
    arguments: dict[str, Any] = field(default_factory=dict)


def offered_tools(body: dict[str, Any]) -> Iterator[tuple[str | None, dict[str, Any]]]:
    """Each function tool a request offers the model, with the namespace it came in (None at the top)."""
    for tool in body.get("tools", []):
        if tool.get("type") == "namespace":
            yield from ((tool.get("name"), inner) for inner in tool.get("tools", []))
        else:
            yield None, tool


def items_of(body: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    """The `input` items of a request of one type (`function_call_output`, `message`, ...)."""
    return [item for item in body.get("input", []) if item.get("type") == kind]


class ResponsesAPI:
    """`with ResponsesAPI() as api:` — listening at `api.url` (a provider's `base_url`) until the block ends.

    Each request takes the next scripted turn (`call`, `say`); with none left it answers "Done.".
    A turn naming a tool the request did not offer answers a message saying so (and the test that
    reads the requests sees why)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.requests: list[dict[str, Any]] = []
        self.script: deque[Turn] = deque()
        self._ids = itertools.count(1)
        app = Starlette(routes=[Route("/v1/responses", self._responses, methods=["POST"])])
        self._server = ThreadedServer(app, self.port)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> ResponsesAPI:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop()

    def reset(self) -> None:
        self.requests.clear()
        self.script.clear()

    def call(self, tool: str, arguments: dict[str, Any]) -> None:
        """Script the model to call `tool` (by its bare name) with `arguments` on the next request."""
        self.script.append(Turn(tool=tool, arguments=arguments))

    def say(self, text: str) -> None:
        """Script the model to answer `text` on the next request."""
        self.script.append(Turn(text=text))

    async def _responses(self, request: Request) -> StreamingResponse:
        body = await request.json()
        self.requests.append(body)
        turn = self.script.popleft() if self.script else Turn()
        events = self._events(body, turn, f"resp_{next(self._ids)}")

        async def stream() -> AsyncIterator[bytes]:
            for event in events:
                yield f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()

        return StreamingResponse(stream(), media_type="text/event-stream")

    def _events(self, body: dict[str, Any], turn: Turn, response_id: str) -> list[dict[str, Any]]:
        created = {"type": "response.created", "response": {"id": response_id}}
        usage = {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
        completed = {"type": "response.completed", "response": {"id": response_id, "usage": usage}}
        offered = {tool["name"]: namespace for namespace, tool in offered_tools(body) if "name" in tool}
        if turn.tool is not None and turn.tool in offered:
            namespace = offered[turn.tool]
            item = {
                "type": "function_call",
                "id": f"fc_{response_id}",
                "call_id": f"call_{response_id}",
                "name": turn.tool,
                "arguments": json.dumps(turn.arguments),
            }
            if namespace is not None:
                item["namespace"] = namespace
            return [created, {"type": "response.output_item.done", "item": item}, completed]
        if turn.tool is not None:
            turn = Turn(text=f"The request offered no tool named {turn.tool}.")
        message_id = f"msg_{response_id}"
        added = {"type": "message", "role": "assistant", "id": message_id, "content": []}
        done = {**added, "content": [{"type": "output_text", "text": turn.text}]}
        return [
            created,
            {"type": "response.output_item.added", "item": added},
            {"type": "response.output_text.delta", "delta": turn.text},
            {"type": "response.output_item.done", "item": done},
            completed,
        ]
