"""The worker side of a background run: the same handler and ToolContext as inline calls.

The handler's messages go to the run's event log (``RunSignals``); cancellations and the
client's answers arrive on this process's channel-layer channel, registered in Redis
under the run. A handler that does not stop within the grace period after a
cancellation or its timeout gets its worker process killed: Celery's main process then
requeues the message, and the redelivery finds the run already ended.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import signal
from collections.abc import Awaitable, Callable
from typing import Any, cast

from channels.layers import get_channel_layer
from django.conf import settings

from mcp_platform.mcp import jsonrpc, names
from mcp_platform.mcp.calls import ClientRequestError
from tools_app.context import ToolContext
from tools_app.execution import execute
from tools_app.models import ToolRun
from tools_app.runs import RunSignals, finish_and_signal, run_set_active_status
from tools_app.spec import ToolSpec

log = logging.getLogger(__name__)

# Runs shorter than this never register for cancellation in Redis (see WorkerCallLink.start).
REGISTER_DELAY_SECONDS = 0.05
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


class WorkerState:
    """Per-process worker state.

    ``in_pool_child``: only Celery pool children may be killed to stop a handler.
    ``loop``: one event loop per process, reused by every run, so the Redis clients and the
    channel layer (whose locks and queues belong to a loop) stay valid between runs.
    """

    in_pool_child = False
    loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def run(cls, coro: Any) -> Any:
        if cls.loop is None or cls.loop.is_closed():
            cls.loop = asyncio.new_event_loop()
        return cls.loop.run_until_complete(coro)


class WorkerCallLink:
    def __init__(self, run: ToolRun) -> None:
        self._run = run
        self._signals = RunSignals()
        self._layer = get_channel_layer()
        self.progress_token = run.progress_token
        self.client_capabilities = run.client_capabilities
        self.client_info: dict[str, Any] = {}
        self.session_id = run.session_id
        self.stream_id = run.stream_id
        self.request_id = cast(jsonrpc.RequestId, run.request_id)  # the JSON-RPC id the call came with
        self.log_level = run.log_level
        self.on_cancel: Callable[[], Awaitable[Any]] | None = None
        self.cancelled = asyncio.Event()
        self._channel = ""
        self._listener: asyncio.Task[None] | None = None
        self._registration: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._waiting: dict[str, asyncio.Future[dict[str, Any]]] = {}

    def start(self) -> None:
        # Like inline calls, short runs never register a channel: a cancellation that comes
        # first is already in the run's row, which registration re-reads.
        delay = REGISTER_DELAY_SECONDS
        self._timer = asyncio.get_running_loop().call_later(delay, self._start_registration)

    def _start_registration(self) -> asyncio.Task[None]:
        if self._registration is None:
            self._registration = asyncio.ensure_future(self._register())
        return self._registration

    async def _register(self) -> None:
        self._channel = await self._layer.new_channel()
        self._listener = asyncio.ensure_future(self._listen())
        await self._signals.redis.set(names.run_channel_key(self._run.id), self._channel, ex=24 * 3600)
        status = await ToolRun.objects.filter(pk=self._run.id).values_list("status", flat=True).afirst()
        if status == ToolRun.Status.CANCELLED:
            self.cancelled.set()

    async def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._registration is None:
            return
        self._registration.cancel()
        if self._listener is not None:
            self._listener.cancel()
        await self._signals.redis.delete(names.run_channel_key(self._run.id))

    async def _listen(self) -> None:
        while True:
            message = await self._layer.receive(self._channel)
            if message.get("type") == "mcp.cancel":
                self.cancelled.set()
            elif message.get("type") == "mcp.reply":
                reply = message.get("message") or {}
                # Only string ids are relayed here (the engine's handle_response drops the rest).
                waiter = self._waiting.get(cast(str, reply.get("id")))
                if waiter is not None and not waiter.done():
                    waiter.set_result(reply)

    # --- CallLink ----------------------------------------------------------------------

    def log_enabled(self, level: str) -> bool:
        threshold = self.log_level if self.log_level in LOG_LEVELS else "info"
        return LOG_LEVELS.index(level) >= LOG_LEVELS.index(threshold)

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        if not self.cancelled.is_set():
            await self._signals.message(self._run, jsonrpc.notification(method, params))

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        await asyncio.shield(self._start_registration())  # the answer comes to our channel
        request_id = f"s-{secrets.token_urlsafe(12)}"
        timeout = settings.MCP_CLIENT_REQUEST_TIMEOUT_SECONDS
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = answer
        pending_key = names.pending_request_key(self._run.session_id, request_id)
        await self._signals.redis.set(pending_key, self._channel, ex=int(timeout) + 30)
        if self._run.is_task:
            await self._set_status(ToolRun.Status.INPUT_REQUIRED)
        try:
            await self._signals.message(self._run, jsonrpc.request(request_id, method, params))
            try:
                reply = await asyncio.wait_for(answer, timeout)
            except TimeoutError:
                await self.notify("notifications/cancelled", {"requestId": request_id, "reason": "timed out"})
                raise ClientRequestError(f"no answer within {timeout:g} seconds") from None
        finally:
            self._waiting.pop(request_id, None)
            await self._signals.redis.delete(pending_key)
            if self._run.is_task:
                await self._set_status(ToolRun.Status.WORKING)
        if "error" in reply:
            error = reply["error"] if isinstance(reply["error"], dict) else {}
            raise ClientRequestError(str(error.get("message", "error")))
        result = reply.get("result")
        return result if isinstance(result, dict) else {}

    async def close_stream(self) -> None:
        """The worker holds no HTTP response; the relaying process decides about its stream."""

    async def open_stream(self) -> str:
        raise RuntimeError("a worker cannot open the client's stream")

    async def forward(self, event: Any) -> None:
        raise RuntimeError("a worker cannot write to the client's stream")

    async def _set_status(self, status: str) -> None:
        from asgiref.sync import sync_to_async

        if await sync_to_async(run_set_active_status)(self._run.id, status):
            await self._run.arefresh_from_db()
            await self._signals.task_status(self._run)


async def run_in_worker(run: ToolRun, tool: ToolSpec) -> None:
    link = WorkerCallLink(run)
    link.start()
    try:
        await _supervise(run, tool, link)
    finally:
        await link.stop()


async def _supervise(run: ToolRun, tool: ToolSpec, link: WorkerCallLink) -> None:
    ctx = ToolContext(link, tool_name=tool.name)
    work = asyncio.ensure_future(execute(tool, run.arguments, ctx))
    cancelled = asyncio.ensure_future(link.cancelled.wait())
    await asyncio.wait({work, cancelled}, return_when=asyncio.FIRST_COMPLETED)
    grace = settings.MCP_CANCEL_GRACE_SECONDS
    if work.done():
        cancelled.cancel()
        result = work.result()
        # A task whose tool reports an error has failed (2025-11-25); a plain call completes
        # and its response carries isError.
        failed = run.is_task and bool(result.get("isError"))
        status = ToolRun.Status.FAILED if failed else ToolRun.Status.COMPLETED
        await finish_and_signal(
            run.id,
            status=status,
            result=result,
            message=ctx.error_message,
            run=run,
            outcome=ctx.outcome,
        )
        if not ctx.handler_returned.is_set():
            # execute() gave up at the timeout; the handler was told (its task cancelled) but
            # blocking code may still run. Give it the grace period, then stop the process.
            await _stop_or_kill(ctx, grace, reason="timed out")
        return
    # Cancelled: the outcome is already recorded by whoever cancelled. The handler sees
    # ctx.cancelled; it gets the grace period to return, then it is interrupted.
    await _stop_or_kill(ctx, grace, reason="cancelled", work=work)


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


__all__ = ["WorkerState", "run_in_worker"]
