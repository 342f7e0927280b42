"""What a native tool's answer says to the model that reads it (docs/tools.md, "Answers").

Every native tool answers in plain text: by default a concise form (`detail="concise"`: one line
per item, no nulls, no scores, names as handles) printed by its answer in app/answers/, or with
`detail="full"` the complete record as compact JSON. Results carry `structuredContent` only where
tools/list declares output schemas (ENGRAM_TOOL_OUTPUT_SCHEMAS): clients that receive both pass the
structured form to the model in place of the text (Claude Code) or beside it (some IDE clients),
so a default answer would otherwise be paid for twice, or in its long form only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel

from app.answers.form import full

Renderer = Callable[[Any], str]  # a result's concise text: a function of app/answers/, or a Form


def answer(result: BaseModel, render: Renderer, detail: str, structured: bool) -> CallToolResult:
    """A native tool's answer. `structured`: the complete record as `structuredContent` too (the tool
    set declares output schemas); the text is then always the concise form, so no client pays for
    the complete record twice."""
    record = result.model_dump(mode="json", by_alias=True) if structured else None
    text = full(result) if detail == "full" and record is None else render(result)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=record)
