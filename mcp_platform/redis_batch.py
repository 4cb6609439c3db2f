"""The hot path's Redis: one multiplexed connection per event loop, commands pipelined.

Every warm MCP call needs a few Redis commands (the session, the tenant's generation, the
call limits, the end-of-call journal entry). Through redis-py's asyncio client each command
paid for a pool checkout, a timeout and a reply parse in Python: measured with cProfile on
32 concurrent calls, about 40 % of a call's CPU, ~50 µs per command. Here the commands of
every request share one connection: a request's commands are packed by hiredis (C), and
at most one write is in flight: commands queued while Redis answers the last write go out
together as soon as it has (a write costs a system call, tens of µs on loopback TCP, far
more than a command; unloaded, a command goes out in the loop turn it was queued), and the replies,
which Redis sends in order, are parsed by hiredis and handed back first in, first out. A
request's own group of commands stays together and in order; no request waits for another
one's reply to be *processed*, only for Redis.

Replies are raw RESP2 values (bytes, int, list, None); an error reply becomes the redis-py
exception of its kind (``NoScriptError`` for NOSCRIPT, else ``ResponseError``) in its place.
A broken or stalled connection fails every command in flight with ``ConnectionError`` and
is opened again by the next command, so the first request after Redis comes back succeeds.

Blocking commands (XREAD BLOCK, BZPOPMIN, …) must not go through here: they would hold up
everyone's replies. The rest of the code uses redis-py (``mcp_platform.redis_clients``).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

import hiredis
from redis.connection import SSLConnection, UnixDomainSocketConnection, parse_url
from redis.exceptions import ConnectionError, NoScriptError, ResponseError

Command = tuple[Any, ...]


class _Pending:
    """One caller's commands in flight: how many replies are still due, and who waits."""

    __slots__ = ("replies", "replies_left", "sent_at", "waiter")

    def __init__(self, replies_left: int, waiter: asyncio.Future[list[Any]], sent_at: float = 0.0) -> None:
        self.replies_left = replies_left
        self.waiter = waiter
        self.replies: list[Any] = []
        self.sent_at = sent_at


def checked(replies: list[Any]) -> list[Any]:
    """The replies of one group of commands, or the first error reply raised."""
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


def ignore_reply(reply: asyncio.Future[Any]) -> None:
    """Retrieve a reply nobody awaits (a done callback): its error is not worth asyncio's
    "exception was never retrieved" report."""
    if not reply.cancelled():
        reply.exception()


def hash_reply(flat: list[bytes]) -> dict[bytes, bytes]:
    """A raw field/value reply (HGETALL's, a stream entry's fields) as a dict."""
    return dict(zip(flat[::2], flat[1::2], strict=True))


def _error(reply: hiredis.ReplyError) -> ResponseError:
    message = str(reply)
    return NoScriptError(message) if message.startswith("NOSCRIPT") else ResponseError(message)


class _Protocol(asyncio.Protocol):
    def __init__(self, owner: CommandBatch) -> None:
        self._owner = owner
        self._reader = hiredis.Reader()

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        while (reply := self._reader.gets()) is not False:
            self._owner._reply(_error(reply) if isinstance(reply, hiredis.ReplyError) else reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self._owner._lost(self, exc)


class CommandBatch:
    def __init__(self, url: str, *, timeout_seconds: float = 30.0, connect_timeout_seconds: float = 5.0) -> None:
        """``timeout_seconds``: a reply later than this means the connection is stuck; it is
        closed and everything in flight fails."""
        self._options = parse_url(url)
        self._timeout = timeout_seconds
        self._connect_timeout = connect_timeout_seconds
        self._transport: asyncio.Transport | None = None
        self._protocol: _Protocol | None = None
        self._connecting: asyncio.Future[None] | None = None
        self._in_flight: deque[_Pending] = deque()
        self._queued: list[tuple[bytes, _Pending]] = []
        self._watchdog: asyncio.TimerHandle | None = None

    def run(self, commands: Sequence[Command]) -> asyncio.Future[list[Any]]:
        """Send ``commands`` with this turn's others; the future gives their replies in order."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[list[Any]] = loop.create_future()
        if len(commands) == 1:
            packed = hiredis.pack_command(commands[0])
        else:
            packed = b"".join([hiredis.pack_command(command) for command in commands])
        if self.idle:
            loop.call_soon(self._flush)  # else the reply to what is in flight sends it
        self._queued.append((packed, _Pending(len(commands), waiter)))
        return waiter

    def send(self, commands: Sequence[Command]) -> None:
        """Send ``commands`` with this turn's others; nobody waits for their replies."""
        self.run(commands).add_done_callback(ignore_reply)

    @property
    def idle(self) -> bool:
        """Nothing queued or in flight: a command sent now is a round trip of its own."""
        return not self._queued and not self._in_flight

    async def one(self, *command: Any) -> Any:
        """One command's reply (an error reply is raised)."""
        (value,) = await self.run((command,))
        if isinstance(value, Exception):
            raise value
        return value

    # --- connection -------------------------------------------------------------------

    def _flush(self) -> None:
        if not self._queued:
            return
        if self._transport is None or self._transport.is_closing():
            if self._connecting is None:
                self._connecting = asyncio.ensure_future(self._connect())
            return  # sent once connected
        queued, self._queued = self._queued, []
        now = time.monotonic()
        for _, pending in queued:
            pending.sent_at = now
            self._in_flight.append(pending)
        self._transport.write(b"".join(packed for packed, _ in queued))
        if self._watchdog is None:
            self._watchdog = asyncio.get_running_loop().call_later(self._timeout, self._check_stall)

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        options = self._options
        try:
            async with asyncio.timeout(self._connect_timeout):
                if options.get("connection_class") is UnixDomainSocketConnection:
                    transport, protocol = await loop.create_unix_connection(lambda: _Protocol(self), options["path"])
                else:
                    secure = ssl.create_default_context() if options.get("connection_class") is SSLConnection else None
                    transport, protocol = await loop.create_connection(
                        lambda: _Protocol(self), options.get("host", "localhost"), options.get("port", 6379), ssl=secure
                    )
                self._transport, self._protocol = transport, protocol
                setup: list[Command] = []
                if options.get("password"):
                    credentials = (options.get("username"), options["password"])
                    setup.append(("AUTH", *credentials) if credentials[0] else ("AUTH", credentials[1]))
                if options.get("db"):
                    setup.append(("SELECT", options["db"]))
                if setup:
                    # Ahead of anything queued: the connection is usable once these are answered.
                    pending = _Pending(len(setup), loop.create_future(), sent_at=time.monotonic())
                    self._in_flight.appendleft(pending)
                    transport.write(b"".join(hiredis.pack_command(command) for command in setup))
                    for reply in await pending.waiter:
                        if isinstance(reply, Exception):
                            raise ConnectionError(f"Redis refused the connection's setup: {reply}")
        except (OSError, TimeoutError, ConnectionError) as exc:
            self._fail_all(ConnectionError(f"cannot reach Redis: {exc}"), queued_too=True)
            if self._transport is not None:
                self._transport.close()
                self._transport = self._protocol = None
        finally:
            self._connecting = None
        if self._queued:
            self._flush()

    def _reply(self, reply: Any) -> None:
        pending = self._in_flight[0]
        pending.replies.append(reply)
        pending.replies_left -= 1
        if pending.replies_left == 0:
            self._in_flight.popleft()
            if not pending.waiter.done():  # its requester may have gone
                pending.waiter.set_result(pending.replies)
            if not self._in_flight:
                self._flush()  # what was queued meanwhile, in one write

    def _check_stall(self) -> None:
        self._watchdog = None
        if not self._in_flight:
            return
        waited = time.monotonic() - self._in_flight[0].sent_at
        if waited >= self._timeout:
            self._abandon(ConnectionError(f"Redis did not answer within {self._timeout:g} s"))
        else:
            self._watchdog = asyncio.get_running_loop().call_later(self._timeout - waited, self._check_stall)

    def _lost(self, protocol: _Protocol, exc: Exception | None) -> None:
        if protocol is not self._protocol:
            return  # a connection already given up (a new one may be in use)
        self._transport = self._protocol = None
        self._fail_all(ConnectionError(f"connection to Redis lost: {exc or 'closed by the server'}"))

    def _abandon(self, exc: Exception) -> None:
        if self._transport is not None:
            transport, self._transport, self._protocol = self._transport, None, None
            transport.abort()
        self._fail_all(exc)

    def _fail_all(self, exc: Exception, *, queued_too: bool = False) -> None:
        failed = list(self._in_flight)
        self._in_flight.clear()
        if queued_too:
            failed.extend(pending for _, pending in self._queued)
            self._queued.clear()
        for pending in failed:
            if not pending.waiter.done():
                pending.waiter.set_exception(exc)
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        if self._queued:  # queued behind what failed: they go out on a new connection
            asyncio.get_running_loop().call_soon(self._flush)

    def close(self) -> None:
        self._abandon(ConnectionError("closed"))
