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
Behind a reverse proxy every request comes from the proxy's address: the per-address cap
belongs in the proxy there (``deploy/nginx.conf``: ``limit_conn``, ``client_body_timeout``).
Answers are JSON: a JSON-RPC error under ``/mcp/``, ``{"detail": …}`` elsewhere.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
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
    """One request's receive and send, with the body's deadline."""

    __slots__ = ("_deadline", "_receive", "_send", "body_done", "started", "timed_out")

    def __init__(self, receive: Receive, send: Send, timeout: float, *, has_body: bool) -> None:
        self._receive = receive
        self._send = send
        self._deadline = asyncio.get_running_loop().time() + timeout
        self.body_done = not has_body
        self.timed_out = False
        self.started = False

    async def receive(self) -> Message:
        if self.body_done or self.timed_out:
            return await self._receive()
        try:
            async with asyncio.timeout_at(self._deadline):
                message = await self._receive()
        except TimeoutError:
            self.timed_out = True
            return {"type": "http.disconnect"}  # the application stops as if the client had left
        if message["type"] != "http.request" or not message.get("more_body"):
            self.body_done = True
        return message

    async def send(self, message: Message) -> None:
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
            await self._serve(scope, receive, send)
        finally:
            self._open[address] -= 1
            if not self._open[address]:
                del self._open[address]

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        guarded = _BodyDeadline(receive, send, self.body_timeout, has_body=_has_body(scope))
        try:
            await self.app(scope, guarded.receive, guarded.send)
        finally:
            if guarded.timed_out and not guarded.started:
                text = f"Request timeout: the body did not arrive within {self.body_timeout:g} s"
                for message in _answer(scope, 408, text, [(b"connection", b"close")]):
                    await send(message)

    def open_from(self, address: str) -> int:
        return self._open.get(address, 0)
