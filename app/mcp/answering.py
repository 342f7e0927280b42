"""What a native tool's answer says to the model that reads it (docs/tools.md, "Answers").

Every native tool answers in plain text: by default a concise form (`detail="concise"`: one line
per item, no nulls, no scores, names as handles) written by the tool's renderer here, or with
`detail="full"` the complete record as compact JSON. Results carry `structuredContent` only where
tools/list declares output schemas (ENGRAM_TOOL_OUTPUT_SCHEMAS): clients that receive both pass the
structured form to the model in place of the text (Claude Code) or beside it (some IDE clients),
so a default answer would otherwise be paid for twice, or in its long form only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal

import pydantic_core
from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel, Field

from app.services.budget import Budget

Detail = Literal["concise", "full"]
DetailArg = Detail  # what it means is in the endpoint's instructions, once (app/mcp/server.py)


# The room an answer may take, for tools whose answers grow with the data (each tool sets its default).
MaxTokens = Annotated[int, Field(ge=200, le=20_000)]


def budget(tokens: int, detail: str, concise: Callable[[Sequence[Any]], Sequence[int]]) -> Budget:
    """The budget of an answer in the form the caller asked for: concise lines, or JSON records."""
    return Budget(tokens, concise if detail == "concise" else _json_sizes)


def _json_sizes(items: Sequence[Any]) -> list[int]:
    return [len(pydantic_core.to_json(item, by_alias=True, exclude_none=True)) + 1 for item in items]


def full(result: Any) -> str:
    """The complete record as compact JSON, nulls left out (they say nothing)."""
    return pydantic_core.to_json(result, by_alias=True, exclude_none=True).decode()


Renderer = Callable[[Any], str]


def answer(result: BaseModel, render: Renderer, detail: str, structured: bool) -> CallToolResult:
    """A native tool's answer. `structured`: the complete record as `structuredContent` too (the tool
    set declares output schemas); the text is then always the concise form, so no client pays for
    the complete record twice."""
    record = result.model_dump(mode="json", by_alias=True) if structured else None
    text = full(result) if detail == "full" and record is None else render(result)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=record)
