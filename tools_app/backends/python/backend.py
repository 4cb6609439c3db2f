"""The ``python`` backend: runs a handler registered with ``@tool_handler``."""

from __future__ import annotations

import inspect
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async

from tools_app.backends.base import BackendConfigError, BackendError, CallContext
from tools_app.backends.python.registry import get_handler, handler_names
from tools_app.catalog.spec import ToolSpec


def validate_config(config: dict[str, Any]) -> None:
    name = config.get("handler")
    if not isinstance(name, str) or not name:
        raise BackendConfigError('the python backend needs {"handler": "<registered name>"}')
    if get_handler(name) is None:
        known = ", ".join(handler_names()) or "none"
        raise BackendConfigError(f"no handler named {name!r} is registered (registered: {known})")


async def call(tool: ToolSpec, arguments: dict[str, Any], ctx: CallContext) -> Any:
    name = tool.backend_config.get("handler", "")
    handler = get_handler(name)
    if handler is None:
        raise BackendError(f"handler {name!r} is not registered in this process")
    if inspect.iscoroutinefunction(handler):
        return await handler(ctx, arguments)

    ctx.blocking = True  # a cancelled await does not stop the thread: it reports for itself

    def run_blocking() -> Any:
        try:
            return handler(BlockingToolContext(ctx), arguments)
        finally:
            ctx.handler_returned.set()  # set in the thread: it says the code really stopped

    return await sync_to_async(run_blocking, thread_sensitive=False)()


def config_choices() -> dict[str, list[str]]:
    return {"handler": handler_names()}


class BlockingToolContext:
    """The context plain ``def`` handlers get: they run in a worker thread, so every call
    into the (async) context blocks until it is done."""

    def __init__(self, ctx: CallContext) -> None:
        self._ctx = ctx
        self.tool_name = ctx.tool_name
        self.report_progress = async_to_sync(ctx.report_progress)
        self.log = async_to_sync(ctx.log)
        self.elicit = async_to_sync(ctx.elicit)
        self.sample = async_to_sync(ctx.sample)

    @property
    def cancelled(self) -> bool:
        return self._ctx.cancelled
