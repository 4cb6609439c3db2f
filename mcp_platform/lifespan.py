"""The server's ASGI lifespan: a graceful stop begins when the stop signal arrives.

On SIGTERM (or SIGINT) uvicorn stops accepting connections, then waits for the open
requests to end before it runs the lifespan shutdown. SSE streams never end on their own,
so that shutdown would come too late to tell their clients. At startup the server's own
signal handlers are installed; ours goes in front of them: it starts the drain (the
streams end with a retry hint, see ``mcp_platform.mcp.transport.drain``) and hands the
signal on, so the server stops exactly as it would have. At shutdown, once every request
ended, the process stops beating: whatever it left unfinished is known dead at once.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Awaitable, Callable
from types import FrameType

from mcp_platform.edge import Receive, Send
from mcp_platform.mcp.detached import detach

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _chain(sig: signal.Signals, on_signal: Callable[[], None]) -> None:
    previous = signal.getsignal(sig)

    def handler(signum: int, frame: FrameType | None) -> None:
        on_signal()
        if callable(previous):
            previous(signum, frame)
        else:  # no server handler: the default action, after the drain was scheduled
            signal.signal(signum, previous)
            signal.raise_signal(signum)

    signal.signal(sig, handler)


async def lifespan(
    receive: Receive,
    send: Send,
    *,
    drain: Callable[[], Awaitable[None]],
    stopped: Callable[[], Awaitable[None]],
) -> None:
    loop = asyncio.get_running_loop()
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            if threading.current_thread() is threading.main_thread():  # signals reach the main thread only

                def start_drain() -> None:
                    loop.call_soon_threadsafe(lambda: detach(drain()))

                for sig in STOP_SIGNALS:
                    _chain(sig, start_drain)
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await stopped()
            await send({"type": "lifespan.shutdown.complete"})
            return
