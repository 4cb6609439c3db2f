"""One inbox per process: where cancellations and client answers for this process's calls arrive.

A handshake-era call that outlives ``REGISTER_DELAY_SECONDS`` (links.py) can be reached from
any server process: a cancellation, or the client's answer to a server→client request, may be
POSTed to another one. Each such call used to open its own channel-layer channel and run its
own receive loop; under load (any call outlives the delay when the process is queueing) that
was a channel, a task and a blocking read per call. Now the process has one channel, read by
one loop started on first use, and a call only registers its *address*: the inbox's channel
and a token naming the call (``Inbox.address``), stored under the call's Redis key as before.
Senders post to the channel with the token in the message (``post``); the loop hands each
message to the handler registered under its token, and drops messages for calls that ended
(as an unread per-call channel used to expire them).

One inbox per event loop and layer: a Celery worker's loop (``RelayCallLink``) has its own.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import weakref
from collections.abc import Callable
from typing import Any

from mcp_platform.mcp.calls import Layer

log = logging.getLogger(__name__)

# Separates the channel from the token in a stored address: channel names never contain one.
_SEPARATOR = " "
# After a failed read (Redis away), wait this long before reading again.
_RETRY_SECONDS = 0.5

Handler = Callable[[dict[str, Any]], None]


class Inbox:
    __slots__ = ("__weakref__", "_channel", "_handlers", "_layer", "_reader", "_starting")

    def __init__(self, layer: Layer) -> None:
        self._layer = layer
        self._channel: str | None = None
        self._starting: asyncio.Future[str] | None = None
        self._reader: asyncio.Task[None] | None = None
        self._handlers: dict[str, Handler] = {}

    async def open(self, handler: Handler) -> tuple[str, str]:
        """Register ``handler`` for a new token; returns (token, the address to store)."""
        channel = await self._started()
        token = secrets.token_urlsafe(9)
        self._handlers[token] = handler
        return token, f"{channel}{_SEPARATOR}{token}"

    def close(self, token: str) -> None:
        self._handlers.pop(token, None)

    async def _started(self) -> str:
        if self._channel is not None:
            return self._channel
        if self._starting is None:
            self._starting = asyncio.ensure_future(self._start())
        return await asyncio.shield(self._starting)

    async def _start(self) -> str:
        try:
            channel = await self._layer.new_channel()
        except BaseException:
            self._starting = None  # the next call tries again
            raise
        self._channel = channel
        self._reader = asyncio.ensure_future(self._read(channel))
        return channel

    async def _read(self, channel: str) -> None:
        while True:
            try:
                message = await self._layer.receive(channel)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # Redis away (an outage the edge already answers with 503s): a line, no traceback.
                log.warning("process inbox: reading %s failed (%s); retrying", channel, exc)
                await asyncio.sleep(_RETRY_SECONDS)
                continue
            handler = self._handlers.get(str(message.get("to", "")))
            if handler is None:
                continue  # the call ended before the message came
            try:
                handler(message)
            except Exception:
                log.exception("process inbox: handling %s failed", message.get("type"))


_inboxes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[int, Inbox]] = weakref.WeakKeyDictionary()


def inbox_for(layer: Layer) -> Inbox:
    """This event loop's inbox on ``layer`` (created on first use; its reader starts lazily)."""
    per_loop = _inboxes.setdefault(asyncio.get_running_loop(), {})
    inbox = per_loop.get(id(layer))
    if inbox is None:
        inbox = per_loop[id(layer)] = Inbox(layer)
    return inbox


async def post(layer: Any, address: bytes | str, message: dict[str, Any]) -> None:
    """Send ``message`` to the call at ``address`` (as stored by the call's registration)."""
    text = address.decode() if isinstance(address, bytes) else address
    channel, _, token = text.partition(_SEPARATOR)
    await layer.send(channel, {**message, "to": token})
