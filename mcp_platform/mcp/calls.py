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
from mcp_platform.redis_batch import CommandBatch

REGISTER_DELAY_SECONDS = 0.05


class ClientRequestError(Exception):
    """The client answered a server→client request with an error, or not in time."""


class InputRequired(BaseException):
    """A handler on the 2026-07-28 leg asked for client input it has no answer for yet.

    A BaseException, like cancellation, so that a handler's ``except Exception`` does not
    swallow it: it ends this round of the call, which answers ``input_required`` with the
    requests of ``InputRound.pending`` (see ``mcp_platform.mcp.stateless``).
    """


class MissingClientCapability(BaseException):
    """A 2026-07-28 request needs a client capability it did not declare (error -32021).

    A BaseException so that the handler's own ``except Exception`` leaves it to the engine.
    """

    def __init__(self, capability: str) -> None:
        super().__init__(capability)
        self.capability = capability


class ContinueAsTask(BaseException):
    """A handler on the 2026-07-28 leg gathered what it needed and continues as a task.

    Raised by ``ctx.continue_as_task()`` on a call that may become one (the request declared
    the tasks extension and the tool supports tasks): the platform creates the task with the
    answers gathered so far and the handler runs again from the start on a worker, where
    the same call returns at once. A BaseException so that ``except Exception`` leaves it.
    """


def _answer_fits(method: str, answer: Any) -> bool:
    """Whether a client's answer has the shape of a result of ``method`` (else it is asked again)."""
    if not isinstance(answer, dict):
        return False
    if method == "elicitation/create":
        content = answer.get("content")
        acted = answer.get("action") in ("accept", "decline", "cancel")
        return acted and (content is None or isinstance(content, dict))
    if method == "sampling/createMessage":
        return isinstance(answer.get("role"), str) and "content" in answer and isinstance(answer.get("model"), str)
    if method == "roots/list":
        return isinstance(answer.get("roots"), list)
    return True


class InputRound:
    """Client input for one execution of a multi-round request (MRTR, 2026-07-28).

    The handler runs again on every round, from the start: a request it makes gets the
    answer the client gave for its key in an earlier round, if there is one. Keys are the
    handler's own (``ctx.elicit(..., key="user_name")``) or numbered per kind in the order
    the requests are made, which is the same on every round. Requests without an answer
    are collected in ``pending``; the first one ends the round (``InputRequired``) after one
    turn of the event loop, so requests the handler started together (``asyncio.gather``)
    are all asked in the same round.
    """

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.pending: dict[str, dict[str, Any]] = {}
        self._counts: dict[str, int] = {}
        self._parked: list[asyncio.Future[None]] = []

    async def ask(self, method: str, params: dict[str, Any], key: str | None = None) -> dict[str, Any]:
        if key is None:
            kind = method.split("/", 1)[0]
            self._counts[kind] = self._counts.get(kind, 0) + 1
            key = f"{kind}-{self._counts[kind]}"
        answer = self.answers.get(key)
        if isinstance(answer, dict) and _answer_fits(method, answer):
            return dict(answer)
        self.pending[key] = {"method": method, "params": params}
        if len(self.pending) == 1:
            await asyncio.sleep(0)  # one turn: requests started together join this round
            raise InputRequired()
        parked: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._parked.append(parked)
        await parked  # the first request ends the round; this one is cancelled with the call
        raise InputRequired()

    def close(self) -> None:
        for parked in self._parked:
            parked.cancel()


@dataclass(frozen=True)
class Relayed:
    """A call whose response someone else (a worker) already wrote to its stream's log.

    ``final_event`` None: this process stopped relaying before the end (its client left, or
    it is shutting down); the end will be in the log for the client that resumes."""

    final_event: StoredEvent | None


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
    protocol_version: str
    # Called instead of interrupting the local task when the client cancels (background calls).
    on_cancel: Callable[[], Awaitable[Any]] | None
    # The 2026-07-28 leg: asking the client is multi-round, a missing capability is an error.
    stateless: bool
    # The request declared the tasks extension and the tool supports tasks (ContinueAsTask).
    may_become_task: bool

    def log_enabled(self, level: str) -> bool: ...

    def input_responses(self) -> dict[str, Any]:
        """The client's answers this (multi-round) call has so far; {} on the legacy leg."""

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        """Send a notification related to this call on its stream."""

    async def request(self, method: str, params: dict[str, Any], key: str | None = None) -> dict[str, Any]:
        """Ask the client (elicitation, sampling, roots) and return its answer.

        On the legacy leg a server→client request on this call's stream; raises
        ClientRequestError on an error answer or a timeout. On the 2026-07-28 leg the answer
        of the client's retry (``key`` names it), or InputRequired to ask for it.
        """

    async def close_stream(self) -> None:
        """Close the HTTP response early; later messages wait in the event store."""

    async def open_stream(self) -> str:
        """Switch the response to SSE now; returns the log position later events follow."""

    async def relay(self, after: str) -> Relayed:
        """Send the client what another process appends to this call's log after ``after``,
        until the final event (the response), which is returned."""

    async def hand_over(self, run_id: str) -> None:
        """The run ``run_id`` (on a worker) produces the rest of this call's stream now."""


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

    async def hand_over(self, run_id: str) -> None: ...


def request_key(request_id: jsonrpc.RequestId) -> str:
    """Request ids 1 and "1" are different requests (1 and '"1"'); an integer, the usual
    id, skips the JSON encoder (a measurable share of a call's CPU)."""
    return str(request_id) if type(request_id) is int else json.dumps(request_id)


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
        protocol_version: str,
        input_round: InputRound | None = None,
    ) -> None:
        """``input_round``: set for calls of the 2026-07-28 leg, whose requests to the client
        are multi-round (MRTR) instead of server→client requests."""
        self._input_round = input_round
        self.input_round = input_round
        self.stateless = input_round is not None
        self.may_become_task = False  # a run on a worker already is whatever it became
        self.protocol_version = protocol_version
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

    def input_responses(self) -> dict[str, Any]:
        return dict(self._input_round.answers) if self._input_round is not None else {}

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        if not self.cancelled.is_set():
            await self._send(jsonrpc.notification(method, params))

    async def request(self, method: str, params: dict[str, Any], key: str | None = None) -> dict[str, Any]:
        if self._input_round is not None:
            return await self._input_round.ask(method, params, key)
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

    def __init__(self, stream: Stream, *, cancel_grace: float, batch: CommandBatch, **runtime: Any) -> None:
        """``batch``: the registration goes through the multiplexed connection. A call that
        outlives the register delay (any call, when the process is loaded) then costs no pool
        connection, and its release can never overtake its claim."""
        super().__init__(session_id=stream.session_id, **runtime)
        self._batch = batch
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
        _, parked_cancel = await self._batch.run(
            (
                ("SET", names.inflight_key(self.session_id, self._request_key), channel, "EX", 24 * 3600),
                ("GETDEL", names.cancelled_key(self.session_id, self._request_key)),
            )
        )
        return parked_cancel is not None

    async def _release(self) -> None:
        await self._batch.run((("DEL", names.inflight_key(self.session_id, self._request_key)),))

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

    async def hand_over(self, run_id: str) -> None:
        await self._stream.hand_over(run_id)


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

    async def hand_over(self, run_id: str) -> None:
        raise RuntimeError("a worker does not hand its runs over")


class StatelessCallLink:
    """The link of a 2026-07-28 call running in this process.

    Its progress and log messages go on the request's own response stream; asking the
    client is multi-round (``InputRound``); the client closing the response stream cancels
    the call (the revision has no resumption, a disconnect is the client's cancel).
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
        input_round: InputRound,
        cancel_grace: float,
        may_become_task: bool,
    ) -> None:
        self.protocol_version = protocol_version
        self.may_become_task = may_become_task
        self._stream = stream
        self._input_round = input_round
        self._cancel_grace = cancel_grace
        self._call: asyncio.Future[Any] | None = None
        self.stateless = True
        self.request_id = request_id
        self.progress_token = progress_token
        self.client_capabilities = client_capabilities
        self.client_info = client_info
        self.log_level = log_level
        self.session_id = stream.session_id
        self.stream_id = stream.stream_id
        self.on_cancel: Callable[[], Awaitable[Any]] | None = None
        self.cancelled = asyncio.Event()

    def watch(self, call: asyncio.Future[Any]) -> None:
        self._call = call

    def cancel(self) -> None:
        """The client went away: stop the call (cooperatively first, as for a legacy cancel)."""
        if self.cancelled.is_set() or self._call is None or self._call.done():
            return
        self.cancelled.set()
        if self.on_cancel is not None:
            detach(self.on_cancel())
            return
        asyncio.get_running_loop().call_later(self._cancel_grace, self._call.cancel)

    def close(self) -> None:
        self._input_round.close()

    def log_enabled(self, level: str) -> bool:
        return loglevels.passes(level, self.log_level)

    def input_responses(self) -> dict[str, Any]:
        return dict(self._input_round.answers)

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        if not self.cancelled.is_set():
            await self._stream.send(jsonrpc.notification(method, params))

    async def request(self, method: str, params: dict[str, Any], key: str | None = None) -> dict[str, Any]:
        return await self._input_round.ask(method, params, key)

    async def close_stream(self) -> None:
        """Nothing to resume on this revision: the stream stays open until the answer."""

    async def open_stream(self) -> str:
        return await self._stream.open()

    async def relay(self, after: str) -> Relayed:
        return await self._stream.relay(after)

    async def hand_over(self, run_id: str) -> None:
        await self._stream.hand_over(run_id)
