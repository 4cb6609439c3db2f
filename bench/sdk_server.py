"""The real peer of the benchmarks: the official MCP Python SDK's ``MCPServer`` with the same
``echo`` tool as Toolbay's demo pack, as a Streamable HTTP ASGI app answering JSON.

    uvicorn bench.sdk_server:app --no-access-log

BENCH_SDK_TOOLS=1000 adds that many more tools, as tools_list_bench gives Toolbay.
"""

from __future__ import annotations

import os

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("bench-peer")


@server.tool()
async def echo(text: str) -> str:
    """Says the text back."""
    return text


def repeat(text: str, count: int = 1) -> str:
    return text * count


for i in range(int(os.environ.get("BENCH_SDK_TOOLS", "0"))):
    server.add_tool(
        repeat,
        name=f"tool_{i:04d}",
        title=f"Tool {i}",
        description=f"Benchmark tool {i}: says the text back, count times.",
        annotations=ToolAnnotations(readOnlyHint=True),
    )


# json_response=True: answers with Content-Length JSON, as Toolbay does for a call that sends
# no notifications (the load client needs no SSE parsing for either).
app = server.streamable_http_app(json_response=True)
