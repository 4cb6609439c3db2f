"""What a tool author imports: the one public API for Python handlers.

Put handlers in a module of your own and name it in ``TOOLBAY_HANDLER_MODULES``; server and
workers import it at start-up, which registers them::

    from typing import Any

    from tools_app.handlers import ToolContext, ToolError, tool_handler


    @tool_handler("acme.greet")
    async def greet(ctx: ToolContext, arguments: dict[str, Any]) -> str:
        if not arguments.get("name"):
            raise ToolError("Say whom to greet: the argument 'name' is empty.")
        return f"Hello, {arguments['name']}!"

- ``@tool_handler(name)``: ``async def handler(ctx: ToolContext, arguments: dict) -> …``
  returning a ``str`` (one text block), a list of content blocks, a dict (the structured
  result of a tool with an output schema) or a whole ``CallToolResult`` dict. A plain
  ``def`` runs in a worker thread with a blocking ``ctx``.
- ``@resource_handler(name)``: ``async def handler(uri, variables) -> str | bytes | list``
  (text, binary content, or ResourceContents dicts) for resource templates and resources.
- ``@prompt_handler(name)``: ``async def handler(arguments) -> list | dict`` (messages, or a
  GetPromptResult). Resource and prompt handlers that take a keyword ``ctx`` may ask the
  client for input like a tool does.
- ``@completion_handler(name)``: ``async def handler(argument, value, context) -> list[str]``,
  named as ``"complete"`` in an entry's backend settings.

``ToolContext`` is what a running tool can do besides returning: ``report_progress``,
``log``, ``elicit``, ``sample``, ``list_roots``, ``cancelled`` / ``wait_cancelled``,
``supports``, ``continue_as_task``. Raise ``ToolError`` for an ``isError`` result with a
message the model can act on, ``BackendError(…, retryable=True)`` for a transient failure
(tools marked idempotent are retried).

**Who may bind a handler.** By default only platform admins may (platform tools). Pass
``catalogs=("acme",)`` to offer it to those tenants' admins for their private tools too, or
``catalogs=EVERY_CATALOG`` to every tenant. Tenants it is not offered to are told it does
not exist and never see its name.
"""

from __future__ import annotations

from tools_app.backends.base import BackendError
from tools_app.backends.python.registry import (
    EVERY_CATALOG,
    completion_handler,
    prompt_handler,
    resource_handler,
    tool_handler,
)
from tools_app.backends.results import ToolError
from tools_app.runs.context import ToolContext

__all__ = [
    "EVERY_CATALOG",
    "BackendError",
    "ToolContext",
    "ToolError",
    "completion_handler",
    "prompt_handler",
    "resource_handler",
    "tool_handler",
]
