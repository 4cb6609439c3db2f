"""The reference for benchmark ratios: a bare ASGI app answering a fixed JSON-RPC result.

It is served by the same ASGI server with the same flags as Toolbay, so the ratio of
Toolbay's rate to this one's says what the platform itself costs on this machine today.
"""

from __future__ import annotations

from typing import Any

BODY = b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"hello"}]}}'


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": BODY})
