"""An upstream MCP server for the tests: the official SDK's MCPServer over Streamable HTTP,
served by uvicorn in a thread on 127.0.0.1, behind a bearer-token check.

The test changes its tools with ``run(...)`` (executed on the server's own event loop)
and ``announce()`` sends ``notifications/tools/list_changed`` to every session that has
listed tools, as a real server tracking its clients would.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Coroutine
from typing import Any

import uvicorn
from mcp.server.elicitation import AcceptedElicitation
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import ToolAnnotations
from pydantic import BaseModel

from tests.poll import wait_for


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Name(BaseModel):
    name: str


class RecordingServer(MCPServer):
    """Remembers the sessions that listed its tools, to announce changes to them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sessions: set[Any] = set()
        self.cancelled_naps = 0
        self.readme_text = "Read me first."

    async def _handle_list_tools(self, ctx: Any, params: Any) -> Any:
        self.sessions.add(ctx.session)
        return await super()._handle_list_tools(ctx, params)


# The test upstream's tools change nothing: they say so, or Toolbay's default confirmation
# policy (destructive, read with the spec's annotation defaults) would ask before each call.
HARMLESS = ToolAnnotations(readOnlyHint=True)


def build_server() -> RecordingServer:
    server = RecordingServer("upstream-test", version="1.2.3", log_level="WARNING")

    @server.tool(description="Count to n, reporting progress and logging each step.", annotations=HARMLESS)
    async def count(n: int, ctx: Context) -> str:
        for step in range(1, n + 1):
            await ctx.report_progress(step, n, f"step {step} of {n}")
            await ctx.info(f"reached {step}")
            await asyncio.sleep(0.01)  # simulated work between steps (behaviour under test)
        return f"counted to {n}"

    @server.tool(
        title="Add numbers",
        description="Add two integers.",
        annotations=ToolAnnotations(readOnlyHint=True, idempotentHint=True),
    )
    def add(a: int, b: int) -> int:
        return a + b

    @server.tool(description="Always fails with a tool error.", annotations=HARMLESS)
    def broken(reason: str) -> str:
        raise ToolError(f"broken on purpose: {reason}")

    @server.tool(description="Fails with a JSON-RPC error.", annotations=HARMLESS)
    def strict(value: str) -> str:
        raise MCPError(-32602, f"strict refuses {value!r}")

    @server.tool(description="Sleeps, for timeouts and cancellation.", annotations=HARMLESS)
    async def nap(seconds: float) -> str:
        try:
            await asyncio.sleep(seconds)  # simulated slow work, to time out or cancel (behaviour under test)
        except asyncio.CancelledError:
            server.cancelled_naps += 1
            raise
        return "rested"

    @server.tool(description="Asks the user for their name (elicitation).", annotations=HARMLESS)
    async def ask(question: str, ctx: Context) -> str:
        answer = await ctx.elicit(question, Name)
        if isinstance(answer, AcceptedElicitation):
            return f"hello {answer.data.name}"
        return f"no answer ({answer.action})"

    @server.resource("up://readme", name="readme", description="The upstream's readme.", mime_type="text/plain")
    def readme() -> str:
        return server.readme_text

    @server.resource("up://items/{item}", name="item", description="One item.", mime_type="application/json")
    def item(item: str) -> str:
        return f'{{"item": "{item}"}}'

    @server.prompt(description="Greets someone.")
    def greet(who: str) -> str:
        return f"Say hello to {who}."

    @server.completion()
    async def complete(ref: Any, argument: Any, context: Any) -> Any:
        from mcp_types import Completion

        if argument.name == "who":
            return Completion(values=[v for v in ("ada", "alan", "grace") if v.startswith(argument.value)])
        return None

    def weird(x: int) -> int:
        return x

    server.add_tool(weird, name="weird name!", description="A name Toolbay does not accept as is.")
    return server


class SdkUpstream:
    def __init__(self, token: str) -> None:
        self.token = token
        self.port = free_port()
        self.mcp = build_server()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.authorizations: list[str] = []
        self.methods: list[str] = []  # HTTP methods of the requests seen, in order
        self.rejected = 0
        app = self.mcp.streamable_http_app(host="127.0.0.1")

        async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if self.loop is None:
                self.loop = asyncio.get_running_loop()
            if scope["type"] == "http":
                self.methods.append(scope["method"])
                headers = dict(scope["headers"])
                authorization = headers.get(b"authorization", b"").decode()
                self.authorizations.append(authorization)
                if authorization != f"Bearer {self.token}":
                    self.rejected += 1
                    plain = [(b"content-type", b"text/plain")]
                    await send({"type": "http.response.start", "status": 401, "headers": plain})
                    await send({"type": "http.response.body", "body": b"unauthorized"})
                    return
            await app(scope, receive, send)

        config = uvicorn.Config(guarded, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    @property
    def host_port(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> SdkUpstream:
        self.thread.start()

        def started() -> bool:
            if not self.thread.is_alive():
                raise RuntimeError("the upstream test server's thread ended")
            return bool(self.server.started)

        wait_for(started, timeout=20, interval=0.02, message="the upstream test server to start")
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run a coroutine on the server's loop (changes to its tools happen there)."""
        assert self.loop is not None, "the server has not served a request yet"
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    def add_tool(self, name: str, description: str) -> None:
        async def change() -> None:
            def fn(text: str) -> str:
                return f"{name}: {text}"

            self.mcp.add_tool(fn, name=name, description=description, annotations=HARMLESS)

        self.run(change())

    def remove_tool(self, name: str) -> None:
        async def change() -> None:
            self.mcp.remove_tool(name)

        self.run(change())

    def describe(self, name: str, description: str) -> None:
        async def change() -> None:
            self.mcp._tool_manager.get_tool(name).description = description

        self.run(change())

    def announce(self) -> int:
        """Send tools/list_changed to every session that listed tools; returns how many got it."""

        async def send() -> int:
            sent = 0
            for session in list(self.mcp.sessions):
                try:
                    await session.send_tool_list_changed()
                    sent += 1
                except Exception:
                    self.mcp.sessions.discard(session)
            return sent

        return int(self.run(send()))
