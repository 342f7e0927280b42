"""Errors a caller can act on. Each carries a short machine-readable code (see docs/tools.md)."""

from __future__ import annotations

from typing import Any, Literal

import orjson

Code = Literal["not_found", "ambiguous", "conflict", "invalid", "limit", "unavailable", "forbidden"]

# What each code is over HTTP (the admin routes, the console's pages and its JSON).
HTTP_STATUS: dict[str, int] = {
    "invalid": 400,
    "forbidden": 403,
    "not_found": 404,
    "ambiguous": 409,
    "conflict": 409,
    "limit": 429,
    "unavailable": 503,
}


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


def http_problem(exc: EngramError) -> tuple[int, str]:
    """The HTTP status of a refusal, and the sentence that tells it (`code: message`)."""
    return HTTP_STATUS.get(exc.code, 500), f"{exc.code}: {exc.message}"
