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


# Resources, prompts and completions served by Python code, registered the same way.
# A resource handler is ``async def handler(uri: str, variables: dict[str, str]) -> …``
# returning text (str), bytes, or a list of ResourceContents dicts; a prompt handler
# ``async def handler(arguments: dict[str, str]) -> …`` returning a list of PromptMessage
# dicts or a GetPromptResult dict; a completion handler
# ``async def handler(argument: str, value: str, context: dict[str, str]) -> list[str]``.
# Plain ``def`` handlers run in a worker thread.

_resource_handlers: dict[str, Handler] = {}
_prompt_handlers: dict[str, Handler] = {}
_completion_handlers: dict[str, Handler] = {}


def _registrar(table: dict[str, Handler], what: str) -> Callable[[str], Callable[[Handler], Handler]]:
    def decorator(name: str) -> Callable[[Handler], Handler]:
        def register(fn: Handler) -> Handler:
            if name in table and table[name] is not fn:
                raise ValueError(f"{what} handler {name!r} is already registered")
            table[name] = fn
            return fn

        return register

    return decorator


resource_handler = _registrar(_resource_handlers, "resource")
prompt_handler = _registrar(_prompt_handlers, "prompt")
completion_handler = _registrar(_completion_handlers, "completion")

HANDLER_TABLES: dict[str, dict[str, Handler]] = {
    "tool": _handlers,
    "resource": _resource_handlers,
    "prompt": _prompt_handlers,
    "completion": _completion_handlers,
}


def handler_of(kind: str, name: str) -> Handler | None:
    """The handler registered under ``name`` for ``kind`` (tool, resource, prompt, completion)."""
    return HANDLER_TABLES[kind].get(name)


def names_of(kind: str) -> list[str]:
    return sorted(HANDLER_TABLES[kind])
