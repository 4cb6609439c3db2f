"""The references for benchmark ratios: bare ASGI apps served by the same ASGI server with
the same flags as Toolbay, so a ratio to them says what the platform itself costs.

- ``app`` answers a fixed JSON-RPC result (throughput);
- ``stream_app`` holds an SSE stream open until the client leaves (the memory an idle
  stream costs the ASGI server alone, before any application code).
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


async def stream_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
    await send({"type": "http.response.body", "body": b"retry: 1000\n\n", "more_body": True})
    while (await receive())["type"] != "http.disconnect":
        pass
