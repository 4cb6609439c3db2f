"""The link between a running tool call and the client that made it: one runtime, three homes.

A handler never writes to HTTP itself: it notifies and asks through a ``CallLink``. Every
link is a ``LinkRuntime``: its messages go to a ``Stream``, a cancellation stops the call
(cooperatively first), and asking the client is multi-round on 2026-07-28 (``InputRound``).
A 2026-07-28 call in this process needs nothing more: a client that closes its stream has
cancelled it. The handshake-era leg adds a ``ChannelLink``: cancellations and the client's
answers to server→client requests can arrive at any server process, so they reach the call
through the process inbox (inbox.py), under an address that the call registers in Redis, but
only once it has run for ``REGISTER_DELAY_SECONDS``: short calls never touch Redis for it, and a cancellation
that arrives earlier is parked and picked up when the call registers. Such a call runs
here on its POST stream (``StreamCallLink``) or on a Celery worker, whose messages go
through the relay (``RelayCallLink``).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, cast

from redis.asyncio import Redis

from mcp_platform.mcp import jsonrpc, loglevels, messages, names
from mcp_platform.mcp.calls import ClientRequestError, Layer, Relayed, Stream, request_key
from mcp_platform.mcp.detached import detach
from mcp_platform.mcp.inbox import inbox_for
from mcp_platform.mcp.relay import CallAddress, Relay
from mcp_platform.mcp.rounds import InputRound
from mcp_platform.redis_batch import CommandBatch

REGISTER_DELAY_SECONDS = 0.05


class LinkRuntime:
    """Everything a call's link does the same wherever the call runs, on either revision.

    ``input_round``: set for calls of the 2026-07-28 leg, whose requests to the client are
    multi-round (MRTR); other links ask the client with a server→client request (``_ask``).
    ``may_become_task``: the request declared the tasks extension and the tool supports
    tasks (a run on a worker already is whatever it became).
    """

    def __init__(
        self,
        stream: Stream,
        *,
        request_id: jsonrpc.RequestId,
        progress_token: str | int | None,
        client_capabilities: dict[str, Any],
        client_info: dict[str, Any],
        log_level: str,
        protocol_version: str,
        cancel_grace: float = 0.0,
        input_round: InputRound | None = None,
        may_become_task: bool = False,
    ) -> None:
        self._stream = stream
        self._cancel_grace = cancel_grace
        self._call: asyncio.Future[Any] | None = None
        self._interrupt: asyncio.TimerHandle | None = None  # the cancel after the grace period
        self._interrupted = False  # the link cancelled ``_call`` (run_under takes it back)
        self.input_round = input_round
        self.stateless = input_round is not None
        self.may_become_task = may_become_task
        self.protocol_version = protocol_version
        self.session_id = stream.session_id
        self.stream_id = stream.stream_id
        self.request_id = request_id
        self.progress_token = progress_token
        self.client_capabilities = client_capabilities
        self.client_info = client_info
        self.log_level = log_level
        self.on_cancel: Callable[[], Awaitable[Any]] | None = None
        self.cancelled = asyncio.Event()

    def watch(self, call: asyncio.Future[Any]) -> None:
        """Start following ``call`` (the task the call runs in, until ``close``): a
        cancellation interrupts it."""
        self._call = call
        if self._stream.cancel_on_disconnect:
            self._stream.on_disconnect(self.cancel)

    def cancel(self) -> None:
        """The client cancelled (or, on 2026-07-28, went away): the handler sees
        ctx.cancelled, and after the grace period it is interrupted."""
        if self.cancelled.is_set() or self._call is None or self._call.done():
            return
        self.cancelled.set()
        if self.on_cancel is not None:
            # Runs elsewhere (a worker): record the cancellation and let the worker stop it;
            # the relay here ends when the run's log ends.
            detach(self.on_cancel())
            return
        self._interrupt = asyncio.get_running_loop().call_later(self._cancel_grace, self._interrupt_call)

    def _interrupt_call(self) -> None:
        self._interrupt = None
        if self._call is not None and not self._call.done():
            self._interrupted = True
            self._call.cancel()

    def took_back(self, task: asyncio.Task[Any]) -> bool:
        """Whether the CancelledError ``task`` got was this link's interruption alone (then
        it is withdrawn from the task: the request goes on to its end)."""
        if not self._interrupted:
            return False
        self._interrupted = False
        return task.uncancel() == 0

    def close(self) -> None:
        """The call ended: the task it ran in is no longer followed (a later cancellation,
        or the pending interruption, must not reach it), and requests it started together
        with the one that ended its round stop waiting."""
        self._call = None
        if self._interrupt is not None:
            self._interrupt.cancel()
            self._interrupt = None
        if self.input_round is not None:
            self.input_round.close()

    async def _ask(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """A server→client request: only links that can receive the answer make one."""
        raise NotImplementedError

    # --- CallLink --------------------------------------------------------------------

    def log_enabled(self, level: str) -> bool:
        return loglevels.passes(level, self.log_level)

    def input_responses(self) -> dict[str, Any]:
        return dict(self.input_round.answers) if self.input_round is not None else {}

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        if not self.cancelled.is_set():
            await self._stream.send(jsonrpc.notification(method, params))

    async def request(self, method: str, params: dict[str, Any], key: str | None = None) -> dict[str, Any]:
        if self.input_round is not None:
            return await self.input_round.ask(method, params, key)
        return await self._ask(method, params)

    async def close_stream(self) -> None:
        await self._stream.close_early()

    async def open_stream(self, run_id: str | None = None) -> str:
        return await self._stream.open(run_id)

    async def relay(self, after: str) -> Relayed:
        return await self._stream.relay(after)


class ChannelLink(LinkRuntime):
    """A handshake-era link: cancellations and the client's answers reach its call through the
    process inbox, at an address registered in Redis.

    Subclasses say under which key the channel is registered and whether a cancellation was
    parked there (``_claim`` / ``_release``).
    """

    def __init__(self, stream: Stream, *, redis: Redis, layer: Layer, request_timeout: float, **fields: Any) -> None:
        super().__init__(stream, **fields)
        self._redis = redis
        self._layer = layer
        self._request_timeout = request_timeout
        self._channel: str | None = None  # the call's address in the process inbox, once registered
        self._token: str | None = None
        self._registration: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._waiting: dict[str, asyncio.Future[dict[str, Any]]] = {}

    # --- hooks -----------------------------------------------------------------------

    async def _claim(self, channel: str) -> bool:
        """Register ``channel`` as the call's; True when a cancellation was already waiting."""
        raise NotImplementedError

    async def _release(self) -> None:
        raise NotImplementedError

    async def _waiting_for_client(self, waiting: bool) -> None:
        """Called around each server→client request (a task reports input_required)."""

    # --- server→client requests ------------------------------------------------------

    async def _ask(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        await asyncio.shield(self._start_registration())  # the answer comes to our channel
        assert self._channel is not None
        request_id = f"s-{secrets.token_urlsafe(12)}"
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = answer
        pending_key = names.pending_request_key(self.session_id, request_id)
        await self._redis.set(pending_key, self._channel, ex=int(self._request_timeout) + 30)
        await self._waiting_for_client(True)
        try:
            await self._stream.send(jsonrpc.request(request_id, method, params))
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
        inbox = inbox_for(self._layer)
        self._token, address = await inbox.open(self._deliver)
        self._channel = address
        if await self._claim(address):
            self.cancel()

    def _deliver(self, message: dict[str, Any]) -> None:
        messages.dispatch(self, message)

    def mcp_cancel(self, message: dict[str, Any]) -> None:
        self.cancel()

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
        self._leave_inbox()
        if self._channel is not None:
            await self._release()

    def close(self) -> None:
        """``stop`` without waiting for Redis (the response need not wait for it)."""
        super().close()
        if self._timer is not None:
            self._timer.cancel()
        for task in list(self._tasks):
            task.cancel()
        self._leave_inbox()
        if self._channel is not None:
            detach(self._release())

    def _leave_inbox(self) -> None:
        if self._token is not None:
            inbox_for(self._layer).close(self._token)
            self._token = None


class StreamCallLink(ChannelLink):
    """The link of a handshake-era call running in this process, answering on its POST stream."""

    def __init__(self, stream: Stream, *, batch: CommandBatch, **fields: Any) -> None:
        """``batch``: the registration goes through the multiplexed connection. A call that
        outlives the register delay (any call, when the process is loaded) then costs no pool
        connection, and its release can never overtake its claim."""
        super().__init__(stream, **fields)
        self._batch = batch
        self._request_key = request_key(self.request_id)

    def watch(self, call: asyncio.Future[Any]) -> None:
        super().watch(call)
        self.start()

    async def _claim(self, channel: str) -> bool:
        _, parked_cancel = await self._batch.run(
            (
                ("SET", names.inflight_key(self.session_id, self._request_key), channel, "EX", 24 * 3600),
                ("GETDEL", names.cancelled_key(self.session_id, self._request_key)),
            )
        )
        return parked_cancel is not None

    async def _release(self) -> None:
        await self._batch.run((("DEL", names.inflight_key(self.session_id, self._request_key)),))


class _RelayedStream:
    """A worker's side of a call's stream: its messages go through the relay; the relaying
    process holds the HTTP response and decides about it."""

    cancel_on_disconnect = False

    def __init__(self, relay: Relay, address: CallAddress) -> None:
        self._relay = relay
        self._address = address
        self.session_id = address.session_id
        self.stream_id = address.stream_id

    async def send(self, message: dict[str, Any]) -> None:
        await self._relay.send(self._address, message)

    async def close_early(self) -> None:
        """The worker holds no HTTP response; the relaying process decides about its stream."""

    def on_disconnect(self, callback: Callable[[], None]) -> None:
        raise RuntimeError("a worker does not see the client's connection")

    async def open(self, run_id: str | None = None) -> str:
        raise RuntimeError("a worker cannot open the client's stream")

    async def relay(self, after: str) -> Relayed:
        raise RuntimeError("a worker cannot relay to the client's stream")


class RelayCallLink(ChannelLink):
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
        **fields: Any,
    ) -> None:
        super().__init__(_RelayedStream(relay, address), request_id=address.request_id, **fields)
        self._relay = relay
        self._run_id = run_id
        self._cancelled_already = cancelled_already
        self._on_waiting = waiting_for_client

    async def _claim(self, channel: str) -> bool:
        await self._relay.register_runner(self._run_id, channel)
        return await self._cancelled_already()

    async def _release(self) -> None:
        await self._relay.unregister_runner(self._run_id)

    def cancel(self) -> None:
        self.cancelled.set()

    async def _waiting_for_client(self, waiting: bool) -> None:
        if self._on_waiting is not None:
            await self._on_waiting(waiting)
