"""Reads, prompts and completions for the MCP engine: resources/read, prompts/get and
completion/complete as the platform serves them (``PlatformToolHost`` delegates here).

Static resources are answered from the process's content cache, everything else from the
entry's backend under its timeout. Every read and every prompt leaves an invocation row
(kind ``resource`` or ``prompt``: who, which URI or prompt, outcome, duration), appended
to the audit journal before the answer goes out, exactly like a tool call's. A URI or
prompt the caller may not see is recorded as denied (rate-limited per credential) and
answered like a missing one. Completions are not recorded: clients ask for them on every
keystroke.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from audit.journal import invocation_row, journal
from audit.models import Invocation, Outcome
from mcp_platform.mcp.calls import InputRequired, MissingClientCapability
from mcp_platform.mcp.host import Requester
from mcp_platform.mcp.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, JsonRpcError
from tenants.principal import Principal
from tools_app.backends.base import Backend, BackendError
from tools_app.backends.registry import BACKENDS, backend_for
from tools_app.backends.results import ToolError
from tools_app.catalog.cache import VisibleSet, content_cache
from tools_app.catalog.prompt_messages import render_messages
from tools_app.catalog.spec import PromptSpec, ResourceSpec, TemplateSpec
from tools_app.runs.context import ToolContext, caller_of

MAX_COMPLETION_VALUES = 100


class _Failed(Exception):
    def __init__(self, outcome: Outcome, message: str) -> None:
        super().__init__(message)
        self.outcome = outcome
        self.message = message


def _row(principal: Principal, requester: Requester, **fields: Any) -> dict[str, Any]:
    return invocation_row(
        tenant_id=principal.tenant_id,
        key_id=principal.key_id,
        key_label=principal.label,
        session_id=requester.session_id,
        protocol_version=requester.protocol_version,
        client=dict(requester.client_info),
        **fields,
    )


async def _backend(
    entry: Any,
    operation: Callable[[Backend, ToolContext | None], Awaitable[Any]],
    requester: Requester | None,
    principal: Principal | None = None,
) -> Any:
    """Run ``operation`` on the entry's backend under the entry's timeout; errors become _Failed.

    A python handler may ask the client for input through the request's link, as a tool
    handler does (``ctx``); HTTP endpoints and upstream servers cannot, and ignore it.
    """
    backend = backend_for(entry.backend_kind)
    ctx = None
    if requester is not None and requester.link is not None:
        # A read or a prompt, not a tool call: no confirmation applies.
        # The caller too: an upstream that acts with each user's own credential needs them.
        caller = caller_of(principal) if principal is not None else None
        ctx = ToolContext(requester.link, tool_name=entry.name, confirmation="none", caller=caller)
    try:
        async with asyncio.timeout(entry.timeout_seconds):
            return await operation(backend, ctx)
    except TimeoutError:
        raise _Failed(Outcome.TIMED_OUT, f"timed out after {entry.timeout_seconds:g} seconds") from None
    except (BackendError, ToolError) as exc:
        raise _Failed(Outcome.FAILED, str(exc)) from None


async def _static_contents(resource: ResourceSpec) -> list[dict[str, Any]]:
    content = await content_cache.get(resource)
    if content is None:
        raise _Failed(Outcome.FAILED, "the resource changed while it was read; read it again")
    base: dict[str, Any] = {"uri": resource.uri}
    if resource.mime_type:
        base["mimeType"] = resource.mime_type
    if content.blob is not None:
        base.setdefault("mimeType", "application/octet-stream")
        return [{**base, "blob": base64.b64encode(content.blob).decode("ascii")}]
    return [{**base, "text": content.text}]


async def read_resource(
    principal: Principal, visible: VisibleSet, uri: str, requester: Requester
) -> dict[str, Any] | None:
    started_at, clock = time.time(), time.perf_counter()
    found = visible.find_resource(uri)
    row = {"kind": Invocation.Kind.RESOURCE, "tool_name": uri, "started_at": started_at}
    if found is None:
        if journal.allow_denied(principal.subject):
            await journal.append(
                _row(principal, requester, outcome=Outcome.DENIED, error_message="Unknown or forbidden resource", **row)
            )
        return None
    entry, variables = found
    row |= {"tool_id": entry.id, "tool_version": entry.version, "arguments": variables}
    try:
        if isinstance(entry, ResourceSpec) and entry.is_static:
            contents = await _static_contents(entry)
        else:
            contents = await _backend(
                entry, lambda backend, ctx: backend.read_resource(entry, uri, variables, ctx=ctx), requester, principal
            )
        if not contents:
            raise _Failed(Outcome.FAILED, "the backend returned no content")
    except (InputRequired, MissingClientCapability) as asked:
        await journal.append(_row(principal, requester, **_asked(asked, clock), **row))
        raise
    except _Failed as exc:
        await journal.append(
            _row(principal, requester, outcome=exc.outcome, error_message=exc.message, duration_ms=_ms(clock), **row)
        )
        raise JsonRpcError(INTERNAL_ERROR, f"Reading {uri} failed: {exc.message}") from None
    await journal.append(_row(principal, requester, outcome=Outcome.COMPLETED, duration_ms=_ms(clock), **row))
    return {"contents": contents}


async def get_prompt(
    principal: Principal, visible: VisibleSet, name: str, arguments: dict[str, str], requester: Requester
) -> dict[str, Any] | None:
    started_at, clock = time.time(), time.perf_counter()
    prompt = visible.prompt_by_name.get(name)
    row = {"kind": Invocation.Kind.PROMPT, "tool_name": name, "arguments": arguments, "started_at": started_at}
    if prompt is None:
        if journal.allow_denied(principal.subject):
            await journal.append(
                _row(principal, requester, outcome=Outcome.DENIED, error_message="Unknown or forbidden prompt", **row)
            )
        return None
    row |= {"tool_id": prompt.id, "tool_version": prompt.version}
    missing = [argument for argument in prompt.required_arguments if argument not in arguments]
    if missing:
        message = f"Missing required argument{'s' if len(missing) > 1 else ''}: {', '.join(missing)}"
        await journal.append(
            _row(principal, requester, outcome=Outcome.INVALID_ARGUMENTS, error_message=message, **row)
        )
        raise JsonRpcError(INVALID_PARAMS, message)
    try:
        result = await _prompt_result(prompt, arguments, requester, principal)
    except (InputRequired, MissingClientCapability) as asked:
        await journal.append(_row(principal, requester, **_asked(asked, clock), **row))
        raise
    except _Failed as exc:
        await journal.append(
            _row(principal, requester, outcome=exc.outcome, error_message=exc.message, duration_ms=_ms(clock), **row)
        )
        raise JsonRpcError(INTERNAL_ERROR, f"Getting the prompt {name} failed: {exc.message}") from None
    await journal.append(_row(principal, requester, outcome=Outcome.COMPLETED, duration_ms=_ms(clock), **row))
    return result


async def _prompt_result(
    prompt: PromptSpec, arguments: dict[str, str], requester: Requester, principal: Principal | None = None
) -> dict[str, Any]:
    declared = {argument["name"] for argument in prompt.arguments}
    given = {name: value for name, value in arguments.items() if name in declared}
    if prompt.backend_kind == "template":
        messages = render_messages(prompt.messages, given)
        result: dict[str, Any] = {}
    else:
        result = dict(
            await _backend(
                prompt, lambda backend, ctx: backend.get_prompt(prompt, given, ctx=ctx), requester, principal
            )
        )
        messages = result.pop("messages")
    if not isinstance(messages, list) or not messages:
        raise _Failed(Outcome.FAILED, "the prompt has no messages")
    if prompt.description and "description" not in result:
        result["description"] = prompt.description
    return {**result, "messages": messages}


async def complete(
    visible: VisibleSet, ref: Mapping[str, Any], argument: str, value: str, context: Mapping[str, str]
) -> dict[str, Any] | None:
    entry: PromptSpec | TemplateSpec | ResourceSpec | None
    if ref.get("type") == "ref/prompt":
        entry = visible.prompt_by_name.get(str(ref.get("name")))
    else:
        uri = str(ref.get("uri"))
        entry = next((t for t in visible.templates if t.uri_template == uri), None) or visible.resource_by_uri.get(uri)
    if entry is None:
        return None
    listed = entry.completions.get(argument) if not isinstance(entry, ResourceSpec) else None
    if listed is not None:
        needle = value.casefold()
        values = [candidate for candidate in listed if candidate.casefold().startswith(needle)]
        return {
            "values": values[:MAX_COMPLETION_VALUES],
            "total": len(values),
            "hasMore": len(values) > MAX_COMPLETION_VALUES,
        }
    if entry.backend_kind in BACKENDS:  # static content completes nothing
        try:
            found = await _backend(
                entry, lambda backend, _: backend.complete(entry, argument, value, dict(context)), requester=None
            )
        except _Failed:
            found = None
        if found is not None:
            return dict(found)
    return {"values": [], "total": 0, "hasMore": False}


def _asked(asked: InputRequired | MissingClientCapability, clock: float) -> dict[str, Any]:
    """The row fields of a read or prompt that needs the client first (2026-07-28): a round
    that asks it, or a request missing the capability it would be asked through."""
    if isinstance(asked, InputRequired):
        outcome, message = Outcome.INPUT_REQUIRED, "Waiting for the client's input"
    else:
        outcome, message = Outcome.DENIED, f"The request did not declare the capability {asked.capability}"
    return {"outcome": outcome, "error_message": message, "duration_ms": _ms(clock)}


def _ms(clock: float) -> float:
    return round((time.perf_counter() - clock) * 1000, 3)
