"""The real peer of the benchmarks: the official MCP Python SDK's ``MCPServer`` with the same
``echo`` tool as Toolbay's demo pack, as a Streamable HTTP ASGI app answering JSON.

    uvicorn bench.sdk_server:app --no-access-log
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

server = MCPServer("bench-peer")


@server.tool()
async def echo(text: str) -> str:
    """Says the text back."""
    return text


# json_response=True: answers with Content-Length JSON, as Toolbay does for a call that sends
# no notifications (the load client needs no SSE parsing for either).
app = server.streamable_http_app(json_response=True)
