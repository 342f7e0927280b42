"""A real HTTP(S) server on loopback, run by uvicorn in a thread, for the parties a test plays
(an identity provider, a client's metadata document host)."""

from __future__ import annotations

import threading
import time
from typing import Any

import uvicorn
from starlette.types import ASGIApp


class ThreadedServer:
    def __init__(self, app: ASGIApp, port: int, **config: Any) -> None:
        self._server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", **config))
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    def start(self) -> None:
        self._thread.start()
        while not self._server.started:
            time.sleep(0.05)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
