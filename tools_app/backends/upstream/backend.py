"""The ``upstream_mcp`` backend: a call is proxied to a tool of an upstream MCP server.

``backend_config``: ``{"upstream": <UpstreamServer id>, "tool": "<the upstream's tool name>"}``
(written by the import in ``tools_app.upstreams``; ``"withdrawn": true`` marks a tool the
upstream stopped offering).

Progress and log notifications of the upstream call reach the Toolbay client as if the
tool ran here; elicitation and sampling requests are relayed to the client too. A JSON-RPC
error from the upstream becomes an ``isError`` result; an unreachable upstream a retryable
``BackendError``.

A packaged server's instance (``tools_app.backends.packaged``) that ended under a call, or is
down and waiting out its restart back-off, fails the call cleanly (``isError``), except for
a tool annotated ``idempotentHint`` or ``readOnlyHint``: that call is tried once more, on a
fresh instance (after the back-off, within the tool's timeout). Calls to a packaged
instance name their caller in ``_meta`` (``CALLER_META``, removed by the runner) so that
its elicitation, sampling and log messages reach the right user.

Resources, resource templates and prompts imported from an upstream name it the same way:
``{"upstream": <id>, "uri": "<the upstream's URI>"}`` for a resource,
``{"upstream": <id>, "uri_template": "<its template>"}`` for a template (a read passes the
URI on as it is) and ``{"upstream": <id>, "prompt": "<its name>"}`` for a prompt;
completions are asked of the upstream too.

An upstream with a ``user_credential`` gets each caller's own token on calls, reads and
prompts (``as_caller``), over a session of that user's own; a caller without a connection is
asked to make one exactly as for an HTTP tool (URL-mode elicitation, -32042, or an
``isError`` result with the link). The listing of the upstream's tools (import, refresh, the
listener) runs without a user and uses the server's own (service) credential; completions,
which have no caller either, are not asked of such an upstream (none are offered).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from mcp_platform import tracing
from tools_app.backends import connections
from tools_app.backends.base import Backend, BackendConfigError, BackendError, CallContext, ContentEntry, Feature
from tools_app.backends.results import ToolError, text_block
from tools_app.backends.upstream.client import (
    CALLER_META,
    INSTANCE_ENDED,
    USER_SCOPE,
    InstanceRestarting,
    UpstreamEndpoint,
    UpstreamError,
    UpstreamUnavailable,
    shared_session,
)
from tools_app.backends.upstream.federation import endpoint_for_tool, forget_instance, upstreams_of
from tools_app.backends.vault import SecretUnavailable, redact
from tools_app.catalog.spec import PromptSpec, ResourceSpec, TemplateSpec, ToolSpec

log = logging.getLogger(__name__)

CONFIG_KEYS = {"upstream", "tool", "withdrawn"}
# How often a retry on a fresh instance looks again while the runner has not yet reported
# the ended instance gone.
FRESH_POLL_SECONDS = 0.05
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


def _caller_scope(ctx: CallContext | None) -> tuple[int | None, str | None]:
    """(the calling tenant, the calling user) for packaged servers' instances."""
    caller = getattr(ctx, "caller", None)
    if caller is None:
        return None, None
    if caller.oauth_subject:
        user = "oauth:" + hashlib.sha256(caller.oauth_subject.encode()).hexdigest()[:24]
    elif caller.key_id is not None:
        user = f"key:{caller.key_id}"
    else:
        user = None
    return caller.tenant_id, user


async def _located(upstream_id: int, tenant_id: int | None, ctx: CallContext | None) -> UpstreamEndpoint:
    """The upstream's endpoint (a packaged server's: its instance, started if need be); raises
    BackendError, or UpstreamUnavailable (InstanceRestarting among them) as it is."""
    caller_tenant, user = _caller_scope(ctx)
    try:
        endpoint = await endpoint_for_tool(upstream_id, tenant_id, caller_tenant_id=caller_tenant, user=user)
    except SecretUnavailable as exc:
        raise BackendError(f"cannot authenticate to the upstream server: {exc}") from None
    if endpoint is None:
        raise BackendError("its upstream server is missing or disabled")
    return endpoint


async def _endpoint(upstream_id: int, tenant_id: int | None, ctx: CallContext | None) -> UpstreamEndpoint:
    try:
        return await _located(upstream_id, tenant_id, ctx)
    except UpstreamUnavailable as exc:
        raise BackendError(str(exc), retryable=True) from None


def _instance_gone(endpoint: UpstreamEndpoint, exc: UpstreamUnavailable) -> bool:
    """A packaged instance's runner answered that it no longer knows it (404 before the call
    was taken), and the locator was told to forget it."""
    if not endpoint.internal:
        return False
    forget_instance(endpoint)  # whatever went wrong, the next call asks where the instance is
    return exc.status == 404


class _InstanceEnded(Exception):
    """The packaged instance ended under the call (its runner said so)."""

    def __init__(self, error: UpstreamError, endpoint: UpstreamEndpoint) -> None:
        super().__init__(error.message)
        self.error = error
        self.endpoint = endpoint


async def _fresh_instance(
    upstream_id: int, tenant_id: int | None, ctx: CallContext, *, dead: str, budget: float
) -> UpstreamEndpoint:
    """A running instance other than the one at ``dead``, waiting out the runner's restart
    back-off when it fits in ``budget`` seconds; raises as ``_located``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + budget
    while True:
        try:
            endpoint = await _located(upstream_id, tenant_id, ctx)
        except InstanceRestarting as exc:
            if loop.time() + exc.retry_in > deadline:
                raise
            # Waiting is the retry here: the runner starts the instance on the first call after it.
            await asyncio.sleep(exc.retry_in + FRESH_POLL_SECONDS)
            continue
        if endpoint.url != dead:
            return endpoint
        # Its runner has not yet reported the ended instance gone (it does within milliseconds).
        forget_instance(endpoint)
        if loop.time() > deadline:
            raise UpstreamUnavailable("the ended instance is still reported running")
        await asyncio.sleep(FRESH_POLL_SECONDS)


async def as_caller(endpoint: UpstreamEndpoint, ctx: CallContext | None) -> UpstreamEndpoint:
    """The endpoint as the calling user reaches it: with their own token in place of the
    service credential, and a session scope of their own; the endpoint itself when the
    upstream has no ``user_credential``. Raises ConnectionPending, JsonRpcError (-32042) or
    BackendError, as an HTTP tool's connection does."""
    credential = endpoint.user_credential
    if credential is None:
        return endpoint
    if ctx is None:
        raise BackendError(f"upstream server {endpoint.name} acts with each user's own credential: it needs a caller")
    caller = connections.caller_of(ctx)
    token = await credential.token(ctx)
    user = hashlib.sha256(f"{caller.tenant_id}:{caller.subject}".encode()).hexdigest()[:32]
    return replace(
        endpoint,
        headers=(("Authorization", f"Bearer {token}"),),
        secret_values=(*endpoint.secret_values, token),
        scope=f"{USER_SCOPE}{user}",
    )


async def _token_refused(endpoint: UpstreamEndpoint, exc: UpstreamUnavailable, ctx: CallContext | None) -> bool:
    """The upstream refused the user's token (401) and asking again may help: the token was
    refreshed, or the connection forgotten so that the user is asked to connect again."""
    credential = endpoint.user_credential
    return exc.status == 401 and credential is not None and ctx is not None and await credential.rejected(ctx)


async def _send(
    entry: Any,
    ctx: CallContext | None,
    send: Callable[[UpstreamEndpoint], Awaitable[dict[str, Any]]],
    refused: Callable[[str, str, int], Exception],
) -> dict[str, Any]:
    """``send`` over the caller's endpoint; sent again, once, to a packaged server's instance
    that answers now (the one this process knew is gone, so the call never reached it), or
    with a fresh token when the upstream refused the user's. An upstream's JSON-RPC error
    becomes ``refused(name, message, code)``, an unreachable upstream a retryable BackendError."""
    config = entry.backend_config
    endpoint = await as_caller(await _endpoint(config["upstream"], entry.tenant_id, ctx), ctx)
    try:
        try:
            return await send(endpoint)
        except UpstreamUnavailable as exc:
            if not (_instance_gone(endpoint, exc) or await _token_refused(endpoint, exc, ctx)):
                raise
            endpoint = await as_caller(await _endpoint(config["upstream"], entry.tenant_id, ctx), ctx)
            return await send(endpoint)
    except UpstreamError as exc:
        raise refused(endpoint.name, redact(exc.message, endpoint.secret_values), exc.code) from None
    except UpstreamUnavailable as exc:
        raise BackendError(f"upstream server {endpoint.name}: {exc}", retryable=True) from None


async def _call(tool: ToolSpec, arguments: dict[str, Any], ctx: CallContext) -> Any:
    config = tool.backend_config
    if config.get("withdrawn"):
        raise ToolError(f"The upstream server no longer offers the tool '{config['tool']}'.")
    upstream_id = config["upstream"]
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

    meta: dict[str, Any] = {"progressToken": token}
    params = {"name": config["tool"], "arguments": arguments, "_meta": meta}
    seen: list[UpstreamEndpoint] = []

    async def send(endpoint: UpstreamEndpoint) -> dict[str, Any]:
        seen.append(endpoint)
        if endpoint.internal:
            meta[CALLER_META] = _caller_scope(ctx)[1] or ""  # for the runner only (never to a real upstream)
        else:
            meta.pop(CALLER_META, None)
        try:
            call = shared_session(endpoint).request(
                "tools/call", params, on_message=on_message, timeout=tool.timeout_seconds
            )
            return await (_traced(call, config["tool"], meta) if tracing.ENABLED else call)
        except UpstreamError as exc:
            if exc.data == INSTANCE_ENDED and endpoint.internal:
                raise _InstanceEnded(exc, endpoint) from None
            raise

    async def send_located(endpoint: UpstreamEndpoint) -> dict[str, Any]:
        try:
            return await send(await as_caller(endpoint, ctx))
        except UpstreamUnavailable as exc:
            if not (_instance_gone(seen[-1], exc) or await _token_refused(seen[-1], exc, ctx)):
                raise
            # The packaged instance this process knew was stopped (idle) or replaced, so the
            # call never reached it; or the upstream refused the user's token, now refreshed:
            # once more, to the instance that answers now, with the caller's token as it is now.
            return await send(await as_caller(await _located(upstream_id, tool.tenant_id, ctx), ctx))

    # A read-only tool is idempotent too (MCP defines idempotentHint for tools that write).
    retry_fresh = bool(tool.annotations.get("idempotentHint") or tool.annotations.get("readOnlyHint"))
    retried = False
    try:
        try:
            result = await send_located(await _located(upstream_id, tool.tenant_id, ctx))
        except (InstanceRestarting, _InstanceEnded) as exc:
            if not retry_fresh or ctx.cancelled:
                raise
            dead = exc.endpoint.url if isinstance(exc, _InstanceEnded) else ""
            if isinstance(exc, _InstanceEnded):
                forget_instance(exc.endpoint)
            log.info("tool %s: %s; trying it once more on a fresh instance", tool.name, exc)
            retried = True
            fresh = await _fresh_instance(upstream_id, tool.tenant_id, ctx, dead=dead, budget=tool.timeout_seconds)
            result = await send_located(fresh)
    except _InstanceEnded as exc:
        message = redact(exc.error.message, exc.endpoint.secret_values)
        again = " (also on a fresh instance)" if retried else ""
        raise ToolError(
            f"The upstream server {exc.endpoint.name} refused the call: {message}{again} (error {exc.error.code})."
        ) from None
    except UpstreamError as exc:
        endpoint = seen[-1]
        message = redact(exc.message, endpoint.secret_values)
        raise ToolError(
            f"The upstream server {endpoint.name} refused the call: {message} (error {exc.code})."
        ) from None
    except connections.ConnectionPending as pending:
        return {"content": [text_block(str(pending))], "isError": True}
    except InstanceRestarting as exc:
        # Not retryable by the runtime: within the back-off a retry would fail the same way.
        raise BackendError(str(exc)) from None
    except UpstreamUnavailable as exc:
        name = seen[-1].name if seen else f"#{upstream_id}"
        raise BackendError(f"upstream server {name}: {exc}", retryable=not retried) from None
    return _clean_result(result)


# --- resources, resource templates and prompts ---------------------------------------------------


def _check_upstream(config: dict[str, Any], key: str) -> None:
    allowed = {"upstream", key, "withdrawn"}
    if set(config) - allowed:
        raise BackendConfigError(
            f"unknown upstream_mcp settings {sorted(set(config) - allowed)}; known: {sorted(allowed)}"
        )
    upstream = config.get("upstream")
    if isinstance(upstream, bool) or not isinstance(upstream, int):
        raise BackendConfigError('the upstream_mcp backend needs "upstream": the id of an upstream server')
    if not isinstance(config.get(key), str) or not config[key]:
        raise BackendConfigError(f'the upstream_mcp backend needs "{key}": its name on the upstream server')


def validate_resource_config(config: dict[str, Any]) -> None:
    _check_upstream(config, "uri")


def validate_template_config(config: dict[str, Any]) -> None:
    _check_upstream(config, "uri_template")


def validate_prompt_config(config: dict[str, Any]) -> None:
    _check_upstream(config, "prompt")


async def _upstream_request(
    entry: Any, method: str, params: dict[str, Any], ctx: CallContext | None = None
) -> dict[str, Any]:
    if entry.backend_config.get("withdrawn"):
        raise BackendError("the upstream server no longer offers it")

    async def send(endpoint: UpstreamEndpoint) -> dict[str, Any]:
        return await shared_session(endpoint).request(method, params, timeout=entry.timeout_seconds)

    def refused(name: str, message: str, code: int) -> Exception:
        return BackendError(f"the upstream server {name} refused it: {message} (error {code})")

    try:
        return await _send(entry, ctx, send, refused)
    except connections.ConnectionPending as pending:
        raise BackendError(str(pending)) from None


async def read_resource(
    entry: Any, uri: str, variables: dict[str, str], ctx: CallContext | None = None
) -> list[dict[str, Any]]:
    upstream_uri = entry.backend_config.get("uri", uri)
    result = await _upstream_request(entry, "resources/read", {"uri": upstream_uri}, ctx)
    contents = result.get("contents")
    if not isinstance(contents, list):
        raise BackendError("the upstream's resources/read result has no contents")
    # The client asked for our URI: answer with it (they are the same unless renamed).
    return [
        {**item, "uri": uri if item.get("uri") == upstream_uri else item.get("uri", uri)}
        for item in contents
        if isinstance(item, dict) and ("text" in item or "blob" in item)
    ]


async def get_prompt(prompt: Any, arguments: dict[str, str], ctx: CallContext | None = None) -> dict[str, Any]:
    result = await _upstream_request(
        prompt, "prompts/get", {"name": prompt.backend_config["prompt"], "arguments": arguments}, ctx
    )
    if not isinstance(result.get("messages"), list):
        raise BackendError("the upstream's prompts/get result has no messages")
    return {key: result[key] for key in ("description", "messages") if key in result}


async def complete(entry: Any, argument: str, value: str, context: dict[str, str]) -> dict[str, Any] | None:
    config = entry.backend_config
    if "prompt" in config:
        ref = {"type": "ref/prompt", "name": config["prompt"]}
    else:
        ref = {"type": "ref/resource", "uri": config.get("uri_template") or config.get("uri")}
    params: dict[str, Any] = {"ref": ref, "argument": {"name": argument, "value": value}}
    if context:
        params["context"] = {"arguments": context}
    try:
        result = await _upstream_request(entry, "completion/complete", params)
    except BackendError:
        return None  # an upstream without completions offers none
    completion = result.get("completion")
    return completion if isinstance(completion, dict) else None


FEATURE_CHECKS = {
    "tool": validate_config,
    "resource": validate_resource_config,
    "template": validate_template_config,
    "prompt": validate_prompt_config,
}


class UpstreamBackend(Backend):
    kind = "upstream_mcp"
    features = frozenset({"resource", "template", "prompt"})

    def validate_config(self, config: dict[str, Any], *, feature: Feature = "tool") -> None:
        FEATURE_CHECKS[feature](config)

    def check_references(self, config: dict[str, Any], *, tenant_id: int | None, feature: Feature = "tool") -> None:
        check_references(config, tenant_id=tenant_id)

    async def call(self, tool: ToolSpec, arguments: dict[str, Any], ctx: CallContext) -> Any:
        return await call(tool, arguments, ctx)

    async def read_resource(
        self, entry: ResourceSpec | TemplateSpec, uri: str, variables: dict[str, str], *, ctx: CallContext | None
    ) -> list[dict[str, Any]]:
        return await read_resource(entry, uri, variables, ctx)

    async def get_prompt(
        self, prompt: PromptSpec, arguments: dict[str, str], *, ctx: CallContext | None
    ) -> dict[str, Any]:
        return await get_prompt(prompt, arguments, ctx)

    async def complete(
        self, entry: ContentEntry, argument: str, value: str, context: dict[str, str]
    ) -> dict[str, Any] | None:
        return await complete(entry, argument, value, context)


async def _traced(call: Awaitable[Any], name: str, meta: dict[str, Any]) -> Any:
    """The upstream call as an MCP CLIENT span; the upstream gets it as ``params._meta.traceparent``
    (the MCP trace-context proposal), set before ``call`` first runs and sends."""
    with tracing.span(
        f"tools/call {name}",
        kind=tracing.SpanKind.CLIENT,
        attributes={"mcp.method.name": "tools/call", "gen_ai.tool.name": name},
    ):
        tracing.inject(meta)
        return await call
