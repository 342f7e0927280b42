"""The form of an answer whose items a budget cuts: one printer, and the measure derived from it.

An answer is its items' chunks inside a frame. `chunks` prints the items, each chunk what one item
adds to the text (with a heading where one starts); `frame` prints the answer around them (its
first and last lines, and headings whose counts are known only once the items are cut). The
measure a budget counts is the bytes of those very chunks, so what is counted is what prints: a
printer and its measure cannot disagree. The rest of an answer fits in the budget's frame.

`detail="full"` prints the complete record as compact JSON instead, each item measured as its own
JSON.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Generic, Literal, TypeVar

import pydantic_core
from pydantic import Field

from app.services.budget import FRAME_BYTES, Budget, Clip

Detail = Literal["concise", "full"]  # what it means is in the endpoint's instructions, once (app/mcp/server.py)
# The room an answer may take, for tools whose answers grow with the data (each tool sets its default).
MaxTokens = Annotated[int, Field(ge=200, le=20_000)]

R = TypeVar("R")
T = TypeVar("T", bound=Clip)


def full(result: Any) -> str:
    """The complete record as compact JSON, nulls left out (they say nothing)."""
    return pydantic_core.to_json(result, by_alias=True, exclude_none=True).decode()


def json_sizes(items: Sequence[Any]) -> list[int]:
    """Bytes of each item in the complete record (and its separator)."""
    return [len(pydantic_core.to_json(item, by_alias=True, exclude_none=True)) + 1 for item in items]


@dataclass(frozen=True)  # no slots: `Form[R, T](...)` sets `__orig_class__` on the instance
class Form(Generic[R, T]):
    """How a result of type R prints, its items of type T cut by a budget. Called, it prints.

    `items`: the result's items in the order they print; `reserve`: bytes the frame needs over the
    budget's shared FRAME_BYTES (a heading at its widest)."""

    items: Callable[[R], Sequence[T]]
    chunks: Callable[[Sequence[T]], list[str]]
    frame: Callable[[R, list[str]], str]
    reserve: int = 0

    def __call__(self, result: R) -> str:
        return self.frame(result, self.chunks(self.items(result)))

    def sizes(self, items: Sequence[T]) -> list[int]:
        """Bytes each item adds to the text as it prints."""
        return [len(c.encode()) for c in self.chunks(items)]

    def budget(self, max_tokens: int, detail: str) -> Budget[T]:
        """The room of an answer in the form the caller asked for: concise lines, or JSON records."""
        if detail == "concise":
            return Budget(max_tokens, self.sizes, FRAME_BYTES + self.reserve)
        return Budget(max_tokens, json_sizes)
