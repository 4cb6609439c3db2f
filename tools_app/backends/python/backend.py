"""The ``python`` backend: runs a handler registered with ``@tool_handler`` (or, for
resources, prompts and completions, ``@resource_handler``, ``@prompt_handler`` and
``@completion_handler``), if the catalog of the tool (or entry) may bind it."""

from __future__ import annotations

import base64
import inspect
from collections.abc import Collection
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async

from tenants.models import Tenant
from tools_app.backends.base import Backend, BackendConfigError, BackendError, CallContext, ContentEntry, Feature
from tools_app.backends.python.registry import Handler, HandlerKind, handler_of, is_offered, names_of, registration_of
from tools_app.catalog.spec import PromptSpec, ResourceSpec, TemplateSpec, ToolSpec

# The registry's kind of the handler each catalog feature binds with "handler".
HANDLER_KIND: dict[Feature, HandlerKind] = {
    "tool": "tool",
    "resource": "resource",
    "template": "resource",
    "prompt": "prompt",
}


def validate_config(config: dict[str, Any]) -> None:
    name = config.get("handler")
    if not isinstance(name, str) or not name:
        raise BackendConfigError('the python backend needs {"handler": "<registered name>"}')


def _catalog_of(tenant_id: int | None) -> str | None:
    """The slug handlers are offered by (None: the platform catalog); "" for a tenant that
    does not exist (offered nothing but what every catalog may bind)."""
    if tenant_id is None:
        return None
    return Tenant.objects.filter(pk=tenant_id).values_list("slug", flat=True).first() or ""


def check_references(config: dict[str, Any], *, tenant_id: int | None, feature: Feature = "tool") -> None:
    """The handler (and a "complete" handler) must be registered and offered to the tool's
    catalog. A handler the catalog may not bind gets the same answer as an unknown one, and
    the list of names holds only what this catalog may bind."""
    catalog = _catalog_of(tenant_id)
    for kind, name in ((HANDLER_KIND[feature], config.get("handler")), ("completion", config.get("complete"))):
        if name is None and kind == "completion":
            continue
        if not isinstance(name, str) or not is_offered(kind, name, catalog):
            known = ", ".join(names_of(kind, [catalog])) or "none"
            what = "handler" if kind == "tool" else f"{kind} handler"
            where = '"complete": ' if kind == "completion" else ""
            raise BackendConfigError(f"{where}no {what} named {name!r} is registered (registered: {known})")


def _catalogs_of(tenant_ids: Collection[int] | None) -> list[str | None] | None:
    if tenant_ids is None:
        return None
    return list(Tenant.objects.filter(pk__in=tenant_ids).values_list("slug", flat=True))


def config_choices(*, tenant_ids: Collection[int] | None = None) -> dict[str, list[str]]:
    """The handler names the catalogs of ``tenant_ids`` may bind (None: every name, which
    the platform catalog may bind)."""
    catalogs = _catalogs_of(tenant_ids)
    return {
        "handler": names_of("tool", catalogs),
        "resource_handler": names_of("resource", catalogs),
        "prompt_handler": names_of("prompt", catalogs),
        "completion_handler": names_of("completion", catalogs),
    }


async def call(tool: ToolSpec, arguments: dict[str, Any], ctx: CallContext) -> Any:
    name = tool.backend_config.get("handler", "")
    registration = registration_of("tool", name)
    if registration is None:
        raise BackendError(f"handler {name!r} is not registered in this process")
    handler = registration.handler
    if registration.is_async:
        return await handler(ctx, arguments)

    ctx.blocking = True  # a cancelled await does not stop the thread: it reports for itself
    returned = ctx.handler_returned  # taken here, in the loop's thread

    def run_blocking() -> Any:
        try:
            return handler(BlockingToolContext(ctx), arguments)
        finally:
            returned.set()  # set in the thread: it says the code really stopped

    return await sync_to_async(run_blocking, thread_sensitive=False)()


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


def _check_shape(config: dict[str, Any], kind: str) -> None:
    allowed = {"handler", "complete"}
    if set(config) - allowed:
        raise BackendConfigError(f"unknown python settings {sorted(set(config) - allowed)}; known: {sorted(allowed)}")
    name = config.get("handler")
    if not isinstance(name, str) or not name:
        raise BackendConfigError(f'the python backend needs {{"handler": "<registered {kind} handler>"}}')
    complete = config.get("complete")
    if complete is not None and not isinstance(complete, str):
        raise BackendConfigError('"complete" must be the name of a registered completion handler')


def validate_resource_config(config: dict[str, Any]) -> None:
    _check_shape(config, "resource")


def validate_prompt_config(config: dict[str, Any]) -> None:
    _check_shape(config, "prompt")


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


class PythonBackend(Backend):
    kind = "python"
    features = frozenset({"resource", "template", "prompt"})

    def validate_config(self, config: dict[str, Any], *, feature: Feature = "tool") -> None:
        if feature == "tool":
            validate_config(config)
        else:
            _check_shape(config, "prompt" if feature == "prompt" else "resource")

    def check_references(self, config: dict[str, Any], *, tenant_id: int | None, feature: Feature = "tool") -> None:
        check_references(config, tenant_id=tenant_id, feature=feature)

    def config_choices(self, *, tenant_ids: Collection[int] | None = None) -> dict[str, list[str]]:
        return config_choices(tenant_ids=tenant_ids)

    async def call(self, tool: ToolSpec, arguments: dict[str, Any], ctx: CallContext) -> Any:
        return await call(tool, arguments, ctx)

    async def read_resource(
        self, entry: ResourceSpec | TemplateSpec, uri: str, variables: dict[str, str], *, ctx: CallContext | None
    ) -> list[dict[str, Any]]:
        return await read_resource(entry, uri, variables, ctx=ctx)

    async def get_prompt(
        self, prompt: PromptSpec, arguments: dict[str, str], *, ctx: CallContext | None
    ) -> dict[str, Any]:
        return await get_prompt(prompt, arguments, ctx=ctx)

    async def complete(
        self, entry: ContentEntry, argument: str, value: str, context: dict[str, str]
    ) -> dict[str, Any] | None:
        return await complete(entry, argument, value, context)
