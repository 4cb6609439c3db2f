"""ASGI lifespan: on a normal shutdown, write the invocation rows still queued in memory."""

from __future__ import annotations

from typing import Any


async def lifespan(scope: dict[str, Any], receive: Any, send: Any) -> None:
    from audit.recorder import recorder

    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await recorder.drain()
            await send({"type": "lifespan.shutdown.complete"})
            return
