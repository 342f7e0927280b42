"""Errors a caller can act on. Each carries a short machine-readable code (see docs/tools.md)."""

from __future__ import annotations

from typing import Any, Literal

import orjson

Code = Literal["not_found", "ambiguous", "conflict", "invalid", "limit", "unavailable", "forbidden"]


class EngramError(Exception):
    def __init__(self, code: Code, message: str, **details: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details

    def __str__(self) -> str:
        """`code: message`, then the details as JSON: readable by a model, parseable by a program."""
        text = f"{self.code}: {self.message}"
        return f"{text} {orjson.dumps(self.details).decode()}" if self.details else text
