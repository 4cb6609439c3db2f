"""Raw ASGI response plumbing shared by the POST and GET streams."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from mcp_platform.mcp import jsonrpc

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


class RequestFailed(Exception):
    """A request failed (raised from its cause) after its id was read: the transport answers
    the cause (a 503 or a -32603) with that id."""

    def __init__(self, request_id: jsonrpc.RequestId) -> None:
        super().__init__(f"request {request_id!r} failed")
        self.request_id = request_id


class Responder:
    """The ASGI exchange of one request: its response, where writes after the client left
    are dropped, and ``receive``, where its body and the client's leaving arrive."""

    __slots__ = ("__weakref__", "_send", "disconnected", "ended", "receive", "started")

    def __init__(self, receive: Receive, send: Send) -> None:
        self.receive = receive
        self._send = send
        self.started = False
        self.ended = False
        self.disconnected = False

    @property
    def open(self) -> bool:
        return self.started and not self.ended and not self.disconnected

    async def start(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.started = True
        await self._safe({"type": "http.response.start", "status": status, "headers": headers})

    async def write(self, body: bytes) -> None:
        if self.open:
            await self._safe({"type": "http.response.body", "body": body, "more_body": True})

    async def end(self, body: bytes = b"") -> None:
        if self.started and not self.ended:
            self.ended = True
            await self._safe({"type": "http.response.body", "body": body, "more_body": False})

    async def whole(self, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
        await self.start(status, [*headers, (b"content-length", str(len(body)).encode())])
        await self.end(body)

    async def json(self, status: int, message: Any, headers: list[tuple[bytes, bytes]] | None = None) -> None:
        await self.whole(status, jsonrpc.dumps(message), [(b"content-type", b"application/json"), *(headers or [])])

    async def _safe(self, message: dict[str, Any]) -> None:
        if self.disconnected:
            return
        try:
            await self._send(message)
        except OSError:
            self.disconnected = True


async def watch_disconnect(responder: Responder) -> None:
    while True:
        message = await responder.receive()
        if message["type"] == "http.disconnect":
            responder.disconnected = True
            return
