"""The worker side of a background run: the same handler and ToolContext as inline calls.

The handler's messages reach the client through the engine's relay (``RelayCallLink``);
cancellations and the client's answers arrive on this process's channel-layer channel,
registered under the run. A handler that does not stop within the grace period after a
cancellation or its timeout gets its worker process killed: Celery's main process then
requeues the message, and the redelivery finds the run already ended.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Coroutine
from typing import Any

from channels.layers import get_channel_layer
from django.conf import settings

from audit.models import Outcome
from mcp_platform.mcp.calls import InputRequired, MissingClientCapability, missing_capability
from mcp_platform.mcp.jsonrpc import JsonRpcError
from mcp_platform.mcp.links import RelayCallLink
from mcp_platform.mcp.rounds import InputRound
from mcp_platform.mcp.versions import MODERN
from mcp_platform.redis_batch import Command
from mcp_platform.redis_clients import async_redis
from tools_app.catalog.spec import ToolSpec
from tools_app.runs import store
from tools_app.runs.context import Caller, ToolContext
from tools_app.runs.delivery import address_of, relay
from tools_app.runs.execution import execute
from tools_app.runs.models import ToolRun
from tools_app.runs.selectors import task_view
from tools_app.runs.services import finish_and_signal, run_park, run_set_active_status

log = logging.getLogger(__name__)


class WorkerState:
    """Per-process worker state.

    ``in_pool_child``: only Celery pool children may be killed to stop a handler.
    ``loop``: one event loop per process, reused by every run, so the Redis clients and the
    channel layer (whose locks and queues belong to a loop) stay valid between runs.
    """

    in_pool_child = False
    loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def run(cls, coro: Coroutine[Any, Any, Any]) -> Any:
        if cls.loop is None or cls.loop.is_closed():
            cls.loop = asyncio.new_event_loop()
        return cls.loop.run_until_complete(coro)


def link_for(run: ToolRun) -> RelayCallLink:
    address = address_of(run)

    async def cancelled_already() -> bool:
        now = await store.load(run.id)
        return now is not None and now.status == ToolRun.Status.CANCELLED

    async def waiting_for_client(waiting: bool) -> None:
        # A task waiting for its client's answer is input_required, and says so.
        if not run.is_task:
            return
        status = ToolRun.Status.INPUT_REQUIRED if waiting else ToolRun.Status.WORKING
        if await run_set_active_status(run.id, status):
            await relay().task_status(address, task_view(await store.load(run.id) or run))

    modern = run.protocol_version in MODERN
    return RelayCallLink(
        relay(),
        address,
        run_id=run.id,
        cancelled_already=cancelled_already,
        waiting_for_client=waiting_for_client,
        redis=async_redis(),
        layer=get_channel_layer(),
        progress_token=run.progress_token,
        client_capabilities=run.client_capabilities,
        client_info={},
        log_level=run.log_level,
        request_timeout=settings.MCP_CLIENT_REQUEST_TIMEOUT_SECONDS,
        protocol_version=run.protocol_version,
        # 2026-07-28: asking the client ends the run with input_required; the retry runs it again.
        input_round=InputRound(run.input_responses) if modern else None,
    )


def announcement(run: ToolRun, deadline: float) -> list[Command]:
    """The commands by which the call's stream names ``run.worker_id`` as its producer
    until ``deadline``."""
    return relay().producer_commands(address_of(run), run.id, worker=run.worker_id, deadline=deadline)


async def run_in_worker(run: ToolRun, tool: ToolSpec) -> None:
    link = link_for(run)
    link.start()
    try:
        await _supervise(run, tool, link)
    finally:
        await link.stop()


def caller_of(run: ToolRun) -> Caller:
    key_id = int(run.subject.rsplit(":", 1)[1]) if ":key:" in run.subject else None
    return Caller(
        tenant_id=run.tenant_id,
        label=run.credential_label,
        key_id=key_id,
        oauth_subject=run.oauth_subject,
        run_id=run.id,
        subject=run.subject,
        oauth_issuer=run.oauth_issuer,
        grant_id=run.grant_id,
    )


async def _supervise(run: ToolRun, tool: ToolSpec, link: RelayCallLink) -> None:
    ctx = ToolContext(
        link, tool_name=tool.name, confirmation=run.confirmation, caller=caller_of(run), call_id=f"run-{run.id}"
    )
    work = asyncio.ensure_future(execute(tool, run.arguments, ctx))
    cancelled = asyncio.ensure_future(link.cancelled.wait())
    await asyncio.wait({work, cancelled}, return_when=asyncio.FIRST_COMPLETED)
    grace = settings.MCP_CANCEL_GRACE_SECONDS
    if work.done():
        cancelled.cancel()
        try:
            result = work.result()
        except InputRequired:
            await _ask_client(run, link, ctx)
            return
        except MissingClientCapability as exc:
            await _fail(run, missing_capability(exc.capability), Outcome.DENIED)
            return
        except JsonRpcError as exc:  # the handler ended the call with a protocol error (-32042 too)
            await _fail(run, exc, Outcome.FAILED)
            return
        # A legacy (2025-11-25) task whose tool reports an error has failed; a 2026-07-28
        # task completes with a result that says isError, as a plain call does.
        failed = run.is_task and run.protocol_version not in MODERN and bool(result.get("isError"))
        status = ToolRun.Status.FAILED if failed else ToolRun.Status.COMPLETED
        await finish_and_signal(
            run.id,
            status=status,
            result=result,
            message=ctx.error_message,
            run=run,
            outcome=ctx.outcome,
            confirmation=_confirmation_fields(ctx),
            connection=ctx.connection_used,
        )
        if not ctx.handler_returned.is_set():
            # execute() gave up at the timeout; the handler was told (its task cancelled) but
            # blocking code may still run. Give it the grace period, then stop the process.
            await _stop_or_kill(ctx, grace, reason="timed out")
        return
    # Cancelled: the outcome is already recorded by whoever cancelled. The handler sees
    # ctx.cancelled; it gets the grace period to return, then it is interrupted.
    await _stop_or_kill(ctx, grace, reason="cancelled", work=work)


def _confirmation_fields(ctx: ToolContext) -> dict[str, Any]:
    return ctx.confirmation_record.row_fields() if ctx.confirmation_record is not None else {}


async def _ask_client(run: ToolRun, link: RelayCallLink, ctx: ToolContext) -> None:
    """The handler needs the client's input (2026-07-28). A task waits for it, holding no
    worker: tasks/get shows the requests, tasks/update's answers queue the run again. A
    plain call ends its round: the ASGI side turns this result into input_required."""
    pending = link.input_round.pending if link.input_round is not None else {}
    if run.is_task:
        if await run_park(run.id, pending):
            await relay().task_status(address_of(run), task_view(await store.load(run.id) or run))
        return
    result = {"resultType": "input_required", "inputRequests": pending, "content": []}
    await finish_and_signal(
        run.id,
        status=ToolRun.Status.COMPLETED,
        result=result,
        run=run,
        outcome=Outcome.INPUT_REQUIRED,
        confirmation=_confirmation_fields(ctx),
    )


async def _fail(run: ToolRun, error: JsonRpcError, outcome: Outcome) -> None:
    await finish_and_signal(
        run.id, status=ToolRun.Status.FAILED, error=error.to_error(), message=error.message, run=run, outcome=outcome
    )


async def _stop_or_kill(
    ctx: ToolContext, grace: float, *, reason: str, work: asyncio.Future[Any] | None = None
) -> None:
    if await asyncio.to_thread(ctx.handler_returned.wait, grace):
        return
    if work is not None:
        work.cancel()
        if await asyncio.to_thread(ctx.handler_returned.wait, 0.2):
            return
    if WorkerState.in_pool_child:
        log.warning(
            "handler of %s did not stop within %.1fs after it was %s; killing worker process %d",
            ctx.tool_name,
            grace,
            reason,
            os.getpid(),
        )
        os.kill(os.getpid(), signal.SIGKILL)
    log.error("handler of %s is still running after it was %s", ctx.tool_name, reason)


__all__ = ["WorkerState", "announcement", "run_in_worker"]
