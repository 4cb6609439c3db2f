"""The link between a running tool call and the client that made it: one runtime, two homes.

A handler never writes to HTTP itself: it notifies and asks through a ``CallLink``. A call
running in this process answers on its POST stream (``StreamCallLink``); a call running on
a Celery worker answers through the relay (``RelayCallLink``). Both share the rest
(``LinkRuntime``): cancellations and the client's answers to server→client requests can
arrive at any server process, so they reach the call through a channel-layer channel that
the call registers in Redis, but only once it has run for ``REGISTER_DELAY_SECONDS``: short
calls never touch Redis for it, and a cancellation that arrives earlier is parked and
picked up when the call registers.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol, cast

from redis.asyncio import Redis

from mcp_platform.mcp import jsonrpc, loglevels, messages, names
from mcp_platform.mcp.detached import detach
from mcp_platform.mcp.events import StoredEvent
from mcp_platform.mcp.relay import CallAddress, Relay

REGISTER_DELAY_SECONDS = 0.05


class ClientRequestError(Exception):
    """The client answered a server→client request with an error, or not in time."""


@dataclass(frozen=True)
class Relayed:
    """A call whose response someone else (a worker) already wrote to its stream's log."""

    final_event: StoredEvent


class CallLink(Protocol):
    progress_token: str | int | None
    client_capabilities: dict[str, Any]
    client_info: dict[str, Any]
    cancelled: asyncio.Event
    # Where the call's messages go, for handing the call to another process.
    session_id: str
    stream_id: str
    request_id: jsonrpc.RequestId
    log_level: str
    # Called instead of interrupting the local task when the client cancels (background calls).
    on_cancel: Callable[[], Awaitable[Any]] | None

    def log_enabled(self, level: str) -> bool: ...

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        """Send a notification related to this call on its stream."""

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Send a request to the client on this call's stream and wait for its answer.

        Raises ClientRequestError on an error answer or a timeout.
        """

    async def close_stream(self) -> None:
        """Close the HTTP response early; later messages wait in the event store."""

    async def open_stream(self) -> str:
        """Switch the response to SSE now; returns the log position later events follow."""

    async def relay(self, after: str) -> Relayed:
        """Send the client what another process appends to this call's log after ``after``,
        until the final event (the response), which is returned."""


class Layer(Protocol):
    async def new_channel(self, prefix: str = ...) -> str: ...

    async def receive(self, channel: str) -> dict[str, Any]: ...


class Stream(Protocol):
    """Where messages related to one client request go (its POST stream)."""

    # Read-only: a link never reassigns them.
    @property
    def session_id(self) -> str: ...

    @property
    def stream_id(self) -> str: ...

    async def send(self, message: dict[str, Any]) -> None: ...

    async def close_early(self) -> None: ...

    async def open(self) -> str: ...

    async def relay(self, after: str) -> Relayed: ...


def request_key(request_id: jsonrpc.RequestId) -> str:
    """Request ids 1 and "1" are different requests."""
    return json.dumps(request_id)


class LinkRuntime:
    """Everything a call's link does the same wherever the call runs.

    Subclasses say where messages go (``_send``), under which key the call's channel is
    registered and whether a cancellation was parked there (``_claim`` / ``_release``), and
    what a cancellation does to the running call (``_cancel``).
    """

    def __init__(
        self,
        *,
        redis: Redis,
        layer: Layer,
        session_id: str,
        request_id: jsonrpc.RequestId,
        progress_token: str | int | None,
        client_capabilities: dict[str, Any],
        client_info: dict[str, Any],
        log_level: str,
        request_timeout: float,
    ) -> None:
        self._redis = redis
        self._layer = layer
        self._request_timeout = request_timeout
        self.session_id = session_id
        self.request_id = request_id
        self.progress_token = progress_token
        self.client_capabilities = client_capabilities
        self.client_info = client_info
        self.log_level = log_level
        self.on_cancel: Callable[[], Awaitable[Any]] | None = None
        self.cancelled = asyncio.Event()
        self._channel: str | None = None
        self._registration: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._waiting: dict[str, asyncio.Future[dict[str, Any]]] = {}

    # --- hooks -----------------------------------------------------------------------

    async def _send(self, message: dict[str, Any]) -> None:
        raise NotImplementedError

    async def _claim(self, channel: str) -> bool:
        """Register ``channel`` as the call's; True when a cancellation was already waiting."""
        raise NotImplementedError

    async def _release(self) -> None:
        raise NotImplementedError

    def _cancel(self) -> None:
        raise NotImplementedError

    async def _waiting_for_client(self, waiting: bool) -> None:
        """Called around each server→client request (a task reports input_required)."""

    # --- CallLink --------------------------------------------------------------------

    def log_enabled(self, level: str) -> bool:
        return loglevels.passes(level, self.log_level)

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        if not self.cancelled.is_set():
            await self._send(jsonrpc.notification(method, params))

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        await asyncio.shield(self._start_registration())  # the answer comes to our channel
        assert self._channel is not None
        request_id = f"s-{secrets.token_urlsafe(12)}"
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = answer
        pending_key = names.pending_request_key(self.session_id, request_id)
        await self._redis.set(pending_key, self._channel, ex=int(self._request_timeout) + 30)
        await self._waiting_for_client(True)
        try:
            await self._send(jsonrpc.request(request_id, method, params))
            try:
                reply = await asyncio.wait_for(answer, self._request_timeout)
            except TimeoutError:
                await self.notify("notifications/cancelled", {"requestId": request_id, "reason": "timed out"})
                raise ClientRequestError(f"no answer within {self._request_timeout:g} seconds") from None
        finally:
            self._waiting.pop(request_id, None)
            await self._redis.delete(pending_key)
            await self._waiting_for_client(False)
        if "error" in reply:
            error = reply["error"] if isinstance(reply["error"], dict) else {}
            raise ClientRequestError(str(error.get("message", "error")))
        result = reply.get("result")
        return result if isinstance(result, dict) else {}

    # --- channel registration ----------------------------------------------------------

    def start(self) -> None:
        self._timer = asyncio.get_running_loop().call_later(REGISTER_DELAY_SECONDS, self._start_registration)

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _start_registration(self) -> asyncio.Task[None]:
        if self._registration is None:
            self._registration = self._spawn(self._register())
        return self._registration

    async def _register(self) -> None:
        channel = await self._layer.new_channel()
        self._channel = channel
        self._spawn(self._listen(channel))
        if await self._claim(channel):
            self._cancel()

    async def _listen(self, channel: str) -> None:
        while True:
            messages.dispatch(self, await self._layer.receive(channel))

    def mcp_cancel(self, message: dict[str, Any]) -> None:
        self._cancel()

    def mcp_reply(self, message: dict[str, Any]) -> None:
        # Only string ids are relayed (the engine's handle_response drops the rest).
        waiter = self._waiting.get(cast(str, messages.reply_id(message)))
        if waiter is not None and not waiter.done():
            waiter.set_result(message["message"])

    async def stop(self) -> None:
        """Stop listening and forget the registration."""
        if self._timer is not None:
            self._timer.cancel()
        for task in list(self._tasks):
            task.cancel()
        if self._channel is not None:
            await self._release()

    def close(self) -> None:
        """``stop`` without waiting for Redis (the response need not wait for it)."""
        if self._timer is not None:
            self._timer.cancel()
        for task in list(self._tasks):
            task.cancel()
        if self._channel is not None:
            detach(self._release())


class StreamCallLink(LinkRuntime):
    """The link of a call running in this process, answering on its POST stream."""

    def __init__(self, stream: Stream, *, cancel_grace: float, **runtime: Any) -> None:
        super().__init__(session_id=stream.session_id, **runtime)
        self._stream = stream
        self._request_key = request_key(self.request_id)
        self._cancel_grace = cancel_grace
        self._call: asyncio.Future[Any] | None = None
        self.stream_id = stream.stream_id

    def watch(self, call: asyncio.Future[Any]) -> None:
        """Start following ``call``: a cancellation interrupts it."""
        self._call = call
        self.start()

    async def _send(self, message: dict[str, Any]) -> None:
        await self._stream.send(message)

    async def _claim(self, channel: str) -> bool:
        pipe = self._redis.pipeline(transaction=False)
        pipe.set(names.inflight_key(self.session_id, self._request_key), channel, ex=24 * 3600)
        pipe.getdel(names.cancelled_key(self.session_id, self._request_key))
        _, parked_cancel = await pipe.execute()
        return parked_cancel is not None

    async def _release(self) -> None:
        await self._redis.delete(names.inflight_key(self.session_id, self._request_key))

    def _cancel(self) -> None:
        if self.cancelled.is_set() or self._call is None or self._call.done():
            return
        self.cancelled.set()
        if self.on_cancel is not None:
            # Runs elsewhere (a worker): record the cancellation and let the worker stop it;
            # the relay here ends when the run's log ends.
            detach(self.on_cancel())
            return
        # Cooperative first: the handler sees ctx.cancelled; after the grace period it is interrupted.
        asyncio.get_running_loop().call_later(self._cancel_grace, self._call.cancel)

    async def close_stream(self) -> None:
        await self._stream.close_early()

    async def open_stream(self) -> str:
        return await self._stream.open()

    async def relay(self, after: str) -> Relayed:
        return await self._stream.relay(after)


class RelayCallLink(LinkRuntime):
    """The link of a call running on a worker: its messages go through the relay, and its
    channel is registered under the run, so cancellations reach this process.

    ``cancelled_already`` says whether the run was cancelled before the channel was
    registered (its durable state knows); ``waiting_for_client`` reports a task's
    input_required while a server→client request is open.
    """

    def __init__(
        self,
        relay: Relay,
        address: CallAddress,
        *,
        run_id: str,
        cancelled_already: Callable[[], Awaitable[bool]],
        waiting_for_client: Callable[[bool], Awaitable[None]] | None = None,
        **runtime: Any,
    ) -> None:
        super().__init__(session_id=address.session_id, request_id=address.request_id, **runtime)
        self._relay = relay
        self._address = address
        self._run_id = run_id
        self._cancelled_already = cancelled_already
        self._on_waiting = waiting_for_client
        self.stream_id = address.stream_id

    async def _send(self, message: dict[str, Any]) -> None:
        await self._relay.send(self._address, message)

    async def _claim(self, channel: str) -> bool:
        await self._relay.register_runner(self._run_id, channel)
        return await self._cancelled_already()

    async def _release(self) -> None:
        await self._relay.unregister_runner(self._run_id)

    def _cancel(self) -> None:
        self.cancelled.set()

    async def _waiting_for_client(self, waiting: bool) -> None:
        if self._on_waiting is not None:
            await self._on_waiting(waiting)

    async def close_stream(self) -> None:
        """The worker holds no HTTP response; the relaying process decides about its stream."""

    async def open_stream(self) -> str:
        raise RuntimeError("a worker cannot open the client's stream")

    async def relay(self, after: str) -> Relayed:
        raise RuntimeError("a worker cannot relay to the client's stream")
