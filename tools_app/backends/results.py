"""Building MCP ``CallToolResult`` objects from what handlers return."""

from __future__ import annotations

import json
from typing import Any


class ToolError(Exception):
    """Raise from a handler to return ``isError: true`` with this message to the model."""


def text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def error_result(message: str) -> dict[str, Any]:
    return {"content": [text_block(message)], "isError": True}


def structured_result(value: dict[str, Any]) -> dict[str, Any]:
    """structuredContent plus a text block carrying the same JSON (for clients without it)."""
    return {"content": [text_block(json.dumps(value, ensure_ascii=False))], "structuredContent": value}


def normalize(output: Any, *, has_output_schema: bool) -> dict[str, Any]:
    """Turn a handler's return value into a CallToolResult dict.

    Accepted shapes: a ``str`` (one text block); a list of content blocks; a dict that
    already is a result (has ``content``); or, for tools with an ``outputSchema``, a
    plain dict that becomes ``structuredContent``.
    """
    if isinstance(output, str):
        return {"content": [text_block(output)]}
    if isinstance(output, list):
        return {"content": output}
    if isinstance(output, dict):
        if "content" in output and isinstance(output["content"], list):
            return output
        if has_output_schema:
            return structured_result(output)
        return {"content": [text_block(json.dumps(output, ensure_ascii=False))]}
    if output is None:
        return {"content": []}
    raise TypeError(f"handler returned {type(output).__name__}; return str, a list of content blocks or a dict")
