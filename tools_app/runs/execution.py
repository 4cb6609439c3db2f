"""Running one tool call: argument validation, the backend, timeout, retries, result checks.

Every failure a model could act on comes back as a result with ``isError: true`` and a
message; nothing here lets a stack trace reach the client. Only a ``JsonRpcError`` the
handler raises on purpose passes through, as the call's protocol error. The same ``execute`` runs inline
calls in the ASGI process (``tools_app.runs.host``) and background calls on Celery workers
(``tools_app.runs.worker``).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from typing import Any

from django.conf import settings

from audit.models import ConfirmationOutcome, Outcome
from mcp_platform import tracing
from mcp_platform.mcp.jsonrpc import JsonRpcError
from tools_app.backends.base import BackendError
from tools_app.backends.registry import backend_for
from tools_app.backends.results import ToolError, error_result, normalize
from tools_app.catalog.confirmation import Asker, asker
from tools_app.catalog.schemas import describe_error, first_error
from tools_app.catalog.spec import ToolSpec
from tools_app.runs.confirmation import confirm, refusal
from tools_app.runs.context import ConfirmationRecord, ToolContext

log = logging.getLogger(__name__)


def argument_problem(tool: ToolSpec, arguments: dict[str, Any]) -> dict[str, Any] | None:
    fast_check = tool.input_fast_check
    if fast_check is not None and fast_check(arguments):
        return None  # surely valid; jsonschema, far slower, judges only what this refuses
    problem = first_error(tool.input_validator, arguments)
    if problem is None:
        return None
    return error_result(describe_error(problem, subject="arguments") + f". Check the inputSchema of '{tool.name}'.")


async def execute(tool: ToolSpec, arguments: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    """Run an already-validated call under the tool's timeout; always returns a CallToolResult
    (and leaves how it ended in ``ctx.outcome`` / ``ctx.error_message``).

    The confirmation its policy asks for comes first, within the same timeout: the backend
    runs only once a person said yes."""
    try:
        async with asyncio.timeout(tool.timeout_seconds):
            asking = _traced_confirm(tool, arguments, ctx) if tracing.ENABLED else confirm(tool, arguments, ctx)
            refused = await asking
            if refused is not None:
                return _ended(ctx, Outcome.NOT_CONFIRMED, refused)
            output = await _call_with_retries(tool, arguments, ctx)
        result = _check_output(tool, normalize(output, has_output_schema=tool.output_schema is not None))
    except TimeoutError:
        record = ctx.confirmation_record
        if record is not None and record.outcome == ConfirmationOutcome.ASKED:
            ctx.confirmation_record = ConfirmationRecord(ConfirmationOutcome.TIMED_OUT)
            return _ended(ctx, Outcome.NOT_CONFIRMED, refusal(tool, ctx.confirmation_record, tool.timeout_seconds))
        return _ended(
            ctx,
            Outcome.TIMED_OUT,
            error_result(f"Tool '{tool.name}' timed out after {tool.timeout_seconds:g} seconds."),
        )
    except ToolError as exc:
        return _ended(ctx, Outcome.ERROR, error_result(str(exc)))
    except BackendError as exc:
        return _ended(ctx, Outcome.ERROR, error_result(f"Tool '{tool.name}' failed: {exc}"))
    except JsonRpcError as exc:
        # A handler may end the call with a protocol error on purpose: the request's error
        # response (or a failed task), not a result the model reads.
        ctx.outcome, ctx.error_message = Outcome.FAILED, exc.message
        raise
    except Exception:
        reference = secrets.token_hex(4)
        log.exception("tool %s failed (reference %s)", tool.name, reference)
        text = f"Tool '{tool.name}' failed with an internal error (reference {reference})."
        return _ended(ctx, Outcome.FAILED, error_result(text))
    if result.get("isError"):
        content = result.get("content") or [{}]
        return _ended(
            ctx, Outcome.ERROR, result, str(content[0].get("text", "")) if isinstance(content[0], dict) else ""
        )
    return result


async def _traced_confirm(tool: ToolSpec, arguments: dict[str, Any], ctx: ToolContext) -> dict[str, Any] | None:
    """``confirm``, traced when it asks someone (the span lasts the wait for an answer)."""
    who = asker(ctx.confirmation, tool.annotations)
    if who is Asker.NOBODY:
        return await confirm(tool, arguments, ctx)
    with tracing.span("toolbay.confirmation", attributes={"toolbay.confirmation.asker": str(who)}) as span:
        try:
            return await confirm(tool, arguments, ctx)
        finally:
            record = ctx.confirmation_record
            if span is not None and record is not None:
                span.set_attribute("toolbay.confirmation.outcome", str(record.outcome))


def _ended(ctx: ToolContext, outcome: Outcome, result: dict[str, Any], message: str | None = None) -> dict[str, Any]:
    ctx.outcome = outcome
    ctx.error_message = message if message is not None else result["content"][0]["text"]
    return result


async def _call_with_retries(tool: ToolSpec, arguments: dict[str, Any], ctx: ToolContext) -> Any:
    backend = backend_for(tool.backend_kind)
    # Validated against the published (curated) schema; the backend gets the source's shape.
    arguments = tool.backend_arguments(arguments)
    # Only idempotent tools may run twice: a retry of anything else could repeat a side effect.
    retries = settings.TOOLBAY_MAX_RETRIES if tool.annotations.get("idempotentHint") else 0
    attempt = 0
    while True:
        ctx.handler_running(True)
        try:
            if not tracing.ENABLED:
                return await backend.call(tool, arguments, ctx)
            with tracing.span(
                f"toolbay.backend {tool.backend_kind}",
                attributes={"toolbay.backend.kind": tool.backend_kind, "toolbay.attempt": attempt + 1},
            ):
                return await backend.call(tool, arguments, ctx)
        except BackendError as exc:
            if not exc.retryable or attempt >= retries or ctx.cancelled:
                raise
            delay = settings.TOOLBAY_RETRY_BACKOFF_SECONDS * (2**attempt)
            attempt += 1
            log.warning(
                "tool %s: transient failure (%s); retry %d/%d in %.2fs", tool.name, exc, attempt, retries, delay
            )
            await asyncio.sleep(delay)
        finally:
            if not ctx.blocking:
                ctx.handler_running(False)  # an awaited backend has stopped once its await ended


def _check_output(tool: ToolSpec, result: dict[str, Any]) -> dict[str, Any]:
    validator = tool.output_validator
    if validator is None or result.get("isError"):
        return result
    if "structuredContent" not in result:
        return error_result(f"Tool '{tool.name}' returned no structuredContent although it declares an outputSchema.")
    fast_check = tool.output_fast_check
    if fast_check is not None and fast_check(result["structuredContent"]):
        return result
    problem = first_error(validator, result["structuredContent"])
    if problem is not None:
        log.warning("tool %s broke its outputSchema: %s", tool.name, problem.message)
        return error_result(
            f"Tool '{tool.name}' produced output that does not match its outputSchema: "
            + describe_error(problem, subject="output")
        )
    return result
