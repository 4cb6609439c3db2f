"""Python tool handlers, registered in code by name.

The admin offers only registered names, so admin input can never point at an arbitrary
import path. A pack module (``tools_app.packs``) decorates its handlers and lists the tool
definitions (``tools_app.catalog.definitions``) that ``seed_demo`` installs.

A handler is ``async def handler(ctx: ToolContext, arguments: dict) -> ToolOutput`` (or a
plain ``def`` with the same shape, which runs in a worker thread with a blocking context).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Handler = Callable[..., Any]

_handlers: dict[str, Handler] = {}


def tool_handler(name: str) -> Callable[[Handler], Handler]:
    """Register ``fn`` under ``name`` (e.g. ``"demo.echo"``); names are unique."""

    def register(fn: Handler) -> Handler:
        if name in _handlers and _handlers[name] is not fn:
            raise ValueError(f"tool handler {name!r} is already registered")
        _handlers[name] = fn
        return fn

    return register


def get_handler(name: str) -> Handler | None:
    return _handlers.get(name)


def handler_names() -> list[str]:
    return sorted(_handlers)
