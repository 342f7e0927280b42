"""A small OpenAI-compatible `/v1/embeddings` server for the tests, answering with real vectors from
the local model. It runs in a thread of the test process, so a test can make it fail, stall or
go down, and read the requests it received."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from app.embeddings.local import LocalModel
from tests.support.server import free_port


class EmbeddingServer:
    def __init__(self, model: LocalModel) -> None:
        self.model = model
        self.port = free_port()
        self.requests: list[dict[str, Any]] = []
        self.failures: deque[int] = deque()  # statuses to answer the next requests with
        self.down = False  # answer 503 to everything
        self.delay = 0.0  # seconds to stall before answering
        self.truncate: int | None = None  # answer with vectors cut to this size
        self.max_chars: int | None = None  # refuse (400) a request holding a longer text, like a real model's limit
        app = Starlette(routes=[Route("/v1/embeddings", self._embeddings, methods=["POST"])])
        self._server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self._thread = threading.Thread(target=self._server.run, name="embedding-server", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> None:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("embedding server did not start")
            time.sleep(0.05)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def reset(self) -> None:
        self.requests.clear()
        self.failures.clear()
        self.down, self.delay, self.truncate, self.max_chars = False, 0.0, None, None

    async def _embeddings(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.requests.append({"headers": dict(request.headers), "body": body})
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.down:
            return JSONResponse({"error": {"message": "service unavailable"}}, status_code=503)
        if self.failures:
            status = self.failures.popleft()
            return JSONResponse({"error": {"message": "try later"}}, status_code=status, headers={"Retry-After": "0"})
        if body.get("model") != "all-MiniLM-L6-v2" or not isinstance(body.get("input"), list):
            return JSONResponse({"error": {"message": "unknown model or input"}}, status_code=400)
        if self.max_chars is not None and any(len(t) > self.max_chars for t in body["input"]):
            return JSONResponse({"error": {"message": "input is too long for this model"}}, status_code=400)
        vectors = await self.model.embed(body["input"])
        if self.truncate:
            vectors = [v[: self.truncate] for v in vectors]
        data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
        data.reverse()  # clients must order by `index`, not by position
        return JSONResponse({"object": "list", "data": data, "model": body["model"]})
