"""The ASGI edge, in front of everything (``/mcp/`` and Django): slow bodies and connection
hogs.

- **Body read timeout**: a request whose body has not fully arrived
  ``TOOLBAY_BODY_READ_TIMEOUT_SECONDS`` after its headers is answered 408 with
  ``Connection: close``; the application sees the client leave (``http.disconnect``) and
  stops, so a client trickling a byte a second holds nothing for long. A response sent
  before the body was read to its end (a 401 needs no body) closes the connection too:
  the ASGI server would otherwise go on reading what the client still trickles.
- **Requests per client address**: past ``TOOLBAY_MAX_CONNECTIONS_PER_CLIENT`` requests
  open at once from one address in this process, the next is answered 429 with
  ``Retry-After`` before it reaches the application.

Both guard this process's own sockets and tasks, so they are counted in its memory.
Behind a reverse proxy the address is the client's only when uvicorn runs with
``--proxy-headers`` (as ``deploy/`` does: ``X-Forwarded-For`` from ``TOOLBAY_TRUSTED_PROXIES``);
the proxy enforces its own equivalents first (``deploy/nginx.conf``: ``limit_conn``,
``client_body_timeout``).
Answers are JSON: a JSON-RPC error under ``/mcp/``, ``{"detail": …}`` elsewhere.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Mapping[str, Any]], Awaitable[None]]  # what Django's ASGIHandler asks for
App = Callable[[Scope, Receive, Send], Awaitable[None]]

SERVER_ERROR = -32000


def _answer(scope: Scope, status: int, text: str, headers: list[tuple[bytes, bytes]]) -> list[Message]:
    if scope["path"].startswith("/mcp/"):
        payload: Any = {"jsonrpc": "2.0", "id": None, "error": {"code": SERVER_ERROR, "message": text}}
    else:
        payload = {"detail": text}
    body = orjson.dumps(payload)
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers]
    return [
        {"type": "http.response.start", "status": status, "headers": head},
        {"type": "http.response.body", "body": body, "more_body": False},
    ]


def _has_body(scope: Scope) -> bool:
    for name, value in scope.get("headers", ()):
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() not in (b"0", b"")):
            return True
    return False


class _BodyDeadline:
    """One request's receive and send, with the body's deadline.

    While its body is incomplete the request sits in its guard's ``pending`` set, which one
    sweeper task per process checks a few times a second: a timer per request (or
    ``asyncio.timeout`` around each receive) cost 15 to 30 µs a request, measured, most of
    it for bodies that had arrived with the headers anyway.
    """

    __slots__ = ("_pending", "_receive", "_send", "_waiting", "body_done", "deadline", "started", "timed_out")

    def __init__(self, receive: Receive, send: Send, deadline: float, pending: set[_BodyDeadline]) -> None:
        self._receive = receive
        self._send = send
        self._waiting: asyncio.Task[Any] | None = None
        self._pending: set[_BodyDeadline] | None = pending  # None once the body is in (or late)
        self.deadline = deadline
        self.body_done = False
        self.timed_out = False
        self.started = False
        pending.add(self)

    def expire(self) -> None:
        self.timed_out = True
        self.done()
        if self._waiting is not None:
            self._waiting.cancel()

    def done(self) -> None:
        if self._pending is not None:
            self._pending.discard(self)
            self._pending = None

    async def receive(self) -> Message:
        if self.timed_out:
            return {"type": "http.disconnect"}  # the application stops as if the client had left
        if self._pending is None:
            return await self._receive()
        self._waiting = task = asyncio.current_task()
        try:
            message = await self._receive()
        except asyncio.CancelledError:
            if self.timed_out and task is not None and task.uncancel() == 0:
                return {"type": "http.disconnect"}
            raise
        finally:
            self._waiting = None
        if message["type"] != "http.request" or not message.get("more_body"):
            self.body_done = True
            self.done()
        return message

    async def send(self, message: Mapping[str, Any]) -> None:
        if self.timed_out:
            return  # the 408 is sent instead, once the application has stopped
        if message["type"] == "http.response.start":
            self.started = True
            if not self.body_done:
                message = {**message, "headers": [*message.get("headers", ()), (b"connection", b"close")]}
        await self._send(message)


class EdgeGuard:
    def __init__(self, app: App, *, body_timeout_seconds: float, max_per_client: int) -> None:
        self.app = app
        self.body_timeout = body_timeout_seconds
        self.max_per_client = max_per_client
        self._open: defaultdict[str, int] = defaultdict(int)
        self._pending: set[_BodyDeadline] = set()
        self._sweeper: asyncio.Task[None] | None = None
        # The deadline is kept to within a quarter of the timeout (and a second at most).
        self._sweep_seconds = min(1.0, body_timeout_seconds / 4)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        address = client[0] if client else ""
        if self.max_per_client and self._open[address] >= self.max_per_client:
            text = f"Too many requests: at most {self.max_per_client} open at once from one address"
            for message in _answer(scope, 429, text, [(b"retry-after", b"1")]):
                await send(message)
            return
        self._open[address] += 1
        try:
            if _has_body(scope):
                await self._serve(scope, receive, send)
            else:
                # No body, no deadline: the application gets the server's own receive and send,
                # so a request that stays open for hours (a GET stream) holds no wrapper.
                await self.app(scope, receive, send)
        finally:
            self._open[address] -= 1
            if not self._open[address]:
                del self._open[address]

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A request with a body, under its deadline."""
        loop = asyncio.get_running_loop()
        guarded = _BodyDeadline(receive, send, loop.time() + self.body_timeout, self._pending)
        if self._sweeper is None or self._sweeper.get_loop() is not loop:
            self._sweeper = loop.create_task(self._sweep())
        try:
            await self.app(scope, guarded.receive, guarded.send)
        finally:
            guarded.done()
            if guarded.timed_out and not guarded.started:
                text = f"Request timeout: the body did not arrive within {self.body_timeout:g} s"
                for message in _answer(scope, 408, text, [(b"connection", b"close")]):
                    await send(message)

    async def _sweep(self) -> None:
        """Expire the requests whose body is late; ends when none is waiting for one."""
        loop = asyncio.get_running_loop()
        try:
            while self._pending:
                await asyncio.sleep(self._sweep_seconds)
                now = loop.time()
                for late in [guarded for guarded in self._pending if guarded.deadline <= now]:
                    late.expire()
        finally:
            if self._sweeper is asyncio.current_task():
                self._sweeper = None
