"""The ``python`` backend: runs a handler registered with ``@tool_handler`` (or, for
resources, prompts and completions, ``@resource_handler``, ``@prompt_handler`` and
``@completion_handler``)."""

from __future__ import annotations

import base64
import inspect
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async

from tools_app.backends.base import BackendConfigError, BackendError, CallContext
from tools_app.backends.python.registry import Handler, get_handler, handler_names, handler_of, names_of
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
    return {
        "handler": handler_names(),
        "resource_handler": names_of("resource"),
        "prompt_handler": names_of("prompt"),
        "completion_handler": names_of("completion"),
    }


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


# --- resources, resource templates, prompts and completions ------------------------------


def _check_handler(config: dict[str, Any], kind: str, *, extra: set[str] | None = None) -> None:
    allowed = {"handler", "complete"} | (extra or set())
    if set(config) - allowed:
        raise BackendConfigError(f"unknown python settings {sorted(set(config) - allowed)}; known: {sorted(allowed)}")
    name = config.get("handler")
    if not isinstance(name, str) or not name:
        raise BackendConfigError(f'the python backend needs {{"handler": "<registered {kind} handler>"}}')
    if handler_of(kind, name) is None:
        known = ", ".join(names_of(kind)) or "none"
        raise BackendConfigError(f"no {kind} handler named {name!r} is registered (registered: {known})")
    complete = config.get("complete")
    if complete is not None and (not isinstance(complete, str) or handler_of("completion", complete) is None):
        known = ", ".join(names_of("completion")) or "none"
        raise BackendConfigError(f'"complete": no completion handler named {complete!r} (registered: {known})')


def validate_resource_config(config: dict[str, Any]) -> None:
    _check_handler(config, "resource")


def validate_prompt_config(config: dict[str, Any]) -> None:
    _check_handler(config, "prompt")


def _wants_context(handler: Handler) -> bool:
    """Whether a resource or prompt handler takes ``ctx`` (to ask the client for input)."""
    return "ctx" in inspect.signature(handler).parameters


async def _run(handler: Handler, *args: Any, ctx: CallContext | None = None) -> Any:
    extra: dict[str, Any] = {}
    if ctx is not None and _wants_context(handler):
        extra["ctx"] = ctx if inspect.iscoroutinefunction(handler) else BlockingToolContext(ctx)
    if inspect.iscoroutinefunction(handler):
        return await handler(*args, **extra)
    return await sync_to_async(handler, thread_sensitive=False)(*args, **extra)


def resource_contents(uri: str, mime_type: str, output: Any) -> list[dict[str, Any]]:
    """ResourceContents from what a resource handler returned (text, bytes or contents)."""
    if isinstance(output, str):
        return [{"uri": uri, **({"mimeType": mime_type} if mime_type else {}), "text": output}]
    if isinstance(output, bytes | bytearray):
        blob = base64.b64encode(bytes(output)).decode("ascii")
        return [{"uri": uri, "mimeType": mime_type or "application/octet-stream", "blob": blob}]
    if isinstance(output, dict):
        output = [output]
    if isinstance(output, list) and all(
        isinstance(item, dict) and ("text" in item or "blob" in item) for item in output
    ):
        return [{"uri": uri, **({"mimeType": mime_type} if mime_type else {}), **item} for item in output]
    raise BackendError("the resource handler returned neither text, bytes nor a list of contents")


async def read_resource(
    entry: Any, uri: str, variables: dict[str, str], *, ctx: CallContext | None = None
) -> list[dict[str, Any]]:
    """``ctx`` reaches a handler that declares it: ``async def handler(uri, variables, *, ctx)``."""
    name = entry.backend_config.get("handler", "")
    handler = handler_of("resource", name)
    if handler is None:
        raise BackendError(f"resource handler {name!r} is not registered in this process")
    return resource_contents(uri, entry.mime_type, await _run(handler, uri, variables, ctx=ctx))


async def get_prompt(prompt: Any, arguments: dict[str, str], *, ctx: CallContext | None = None) -> dict[str, Any]:
    """``ctx`` reaches a handler that declares it: ``async def handler(arguments, *, ctx)``."""
    name = prompt.backend_config.get("handler", "")
    handler = handler_of("prompt", name)
    if handler is None:
        raise BackendError(f"prompt handler {name!r} is not registered in this process")
    output = await _run(handler, arguments, ctx=ctx)
    if isinstance(output, list):
        return {"messages": output}
    if isinstance(output, dict) and isinstance(output.get("messages"), list):
        return output
    raise BackendError("the prompt handler returned neither a list of messages nor a GetPromptResult")


async def complete(entry: Any, argument: str, value: str, context: dict[str, str]) -> dict[str, Any] | None:
    """Values from the entry's "complete" handler; None when it has none."""
    name = entry.backend_config.get("complete")
    handler = handler_of("completion", name) if isinstance(name, str) else None
    if handler is None:
        return None
    values = await _run(handler, argument, value, context)
    if not isinstance(values, list):
        raise BackendError("the completion handler did not return a list of strings")
    return {"values": [str(v) for v in values]}
