"""The ``upstream_mcp`` backend: a call is proxied to a tool of an upstream MCP server.

``backend_config``: ``{"upstream": <UpstreamServer id>, "tool": "<the upstream's tool name>"}``
(written by the import in ``tools_app.upstreams``; ``"withdrawn": true`` marks a tool the
upstream stopped offering).

Progress and log notifications of the upstream call reach the Toolbay client as if the
tool ran here; elicitation and sampling requests are relayed to the client too. A JSON-RPC
error from the upstream becomes an ``isError`` result; an unreachable upstream a retryable
``BackendError``.
"""

from __future__ import annotations

import contextlib
import secrets
from typing import Any

from tools_app.backends.base import BackendConfigError, BackendError, CallContext
from tools_app.backends.results import ToolError
from tools_app.backends.upstream.client import UpstreamError, UpstreamUnavailable, shared_session
from tools_app.backends.upstream.federation import endpoint_for_tool, upstreams_of
from tools_app.backends.vault import SecretUnavailable, redact
from tools_app.catalog.spec import ToolSpec

CONFIG_KEYS = {"upstream", "tool", "withdrawn"}
RESULT_KEYS = ("content", "structuredContent", "isError")


def validate_config(config: dict[str, Any]) -> None:
    unknown = set(config) - CONFIG_KEYS
    if unknown:
        raise BackendConfigError(f"unknown upstream_mcp settings {sorted(unknown)}; known: {sorted(CONFIG_KEYS)}")
    upstream = config.get("upstream")
    if isinstance(upstream, bool) or not isinstance(upstream, int):
        raise BackendConfigError('the upstream_mcp backend needs "upstream": the id of an upstream server')
    if not isinstance(config.get("tool"), str) or not config["tool"]:
        raise BackendConfigError('the upstream_mcp backend needs "tool": the tool\'s name on the upstream server')
    if not isinstance(config.get("withdrawn", False), bool):
        raise BackendConfigError('"withdrawn" must be true or false')


def check_references(config: dict[str, Any], *, tenant_id: int | None) -> None:
    if not upstreams_of(tenant_id).filter(pk=config["upstream"]).exists():
        scope = "the platform's" if tenant_id is None else "this tenant's"
        raise BackendConfigError(f"there is no upstream server with id {config['upstream']} among {scope} servers")


async def _answer_upstream_request(ctx: CallContext, method: str, params: dict[str, Any]) -> dict[str, Any]:
    try:
        if method == "elicitation/create":
            return await ctx.elicit(params.get("message", ""), params.get("requestedSchema") or {})
        if method == "sampling/createMessage":
            options = {k: v for k, v in params.items() if k not in ("messages", "maxTokens")}
            return await ctx.sample(params.get("messages") or [], max_tokens=params.get("maxTokens", 1000), **options)
    except ToolError as exc:
        raise UpstreamError(-32603, str(exc)) from None
    raise UpstreamError(-32601, f"Method not found: {method}")


def _clean_result(result: dict[str, Any]) -> dict[str, Any]:
    cleaned = {key: result[key] for key in RESULT_KEYS if key in result}
    if not isinstance(cleaned.get("content"), list):
        cleaned["content"] = []
    if "structuredContent" in cleaned and not isinstance(cleaned["structuredContent"], dict):
        del cleaned["structuredContent"]
    if cleaned.get("isError") is not True:
        cleaned.pop("isError", None)
    return cleaned


async def call(tool: ToolSpec, arguments: dict[str, Any], ctx: CallContext) -> Any:
    return await _call(tool, arguments, ctx)


async def _call(tool: ToolSpec, arguments: dict[str, Any], ctx: CallContext) -> Any:
    config = tool.backend_config
    if config.get("withdrawn"):
        raise ToolError(f"The upstream server no longer offers the tool '{config['tool']}'.")
    try:
        endpoint = await endpoint_for_tool(config["upstream"], tool.tenant_id)
    except SecretUnavailable as exc:
        raise BackendError(f"cannot authenticate to the upstream server: {exc}") from None
    if endpoint is None:
        raise BackendError("its upstream server is missing or disabled")
    session = shared_session(endpoint)
    token = f"toolbay-{secrets.token_hex(8)}"

    async def on_message(message: dict[str, Any]) -> dict[str, Any] | None:
        method = message.get("method")
        params: dict[str, Any] = message["params"] if isinstance(message.get("params"), dict) else {}
        if "id" in message:
            return await _answer_upstream_request(ctx, str(method), params)
        if method == "notifications/progress" and params.get("progressToken") == token:
            progress = params.get("progress")
            if isinstance(progress, int | float):
                with contextlib.suppress(ValueError):  # an upstream whose progress does not increase
                    await ctx.report_progress(progress, params.get("total"), params.get("message"))
        elif method == "notifications/message":
            with contextlib.suppress(ValueError):  # an unknown level
                await ctx.log(str(params.get("level", "info")), params.get("data"), logger=params.get("logger"))
        return None

    params = {"name": config["tool"], "arguments": arguments, "_meta": {"progressToken": token}}
    try:
        result = await session.request("tools/call", params, on_message=on_message, timeout=tool.timeout_seconds)
    except UpstreamError as exc:
        message = redact(exc.message, endpoint.secret_values)
        raise ToolError(
            f"The upstream server {endpoint.name} refused the call: {message} (error {exc.code})."
        ) from None
    except UpstreamUnavailable as exc:
        raise BackendError(f"upstream server {endpoint.name}: {exc}", retryable=True) from None
    return _clean_result(result)
