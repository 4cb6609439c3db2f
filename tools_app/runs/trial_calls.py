"""Test calls: run a tool once, as an operator checking it, outside any MCP session.

The call takes the real path — argument validation against ``inputSchema``, the backend,
the timeout, the ``outputSchema`` check — and answers what an MCP client would have got,
plus the notifications the handler sent on the way. There is no client behind it, so
elicitation and sampling are refused with a message saying so; background tools run here
too, under a timeout capped by ``TOOLBAY_TEST_CALL_TIMEOUT_SECONDS``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings

from mcp_platform.mcp.calls import ClientRequestError, Relayed
from tools_app.catalog.models import Tool
from tools_app.catalog.spec import ToolSpec
from tools_app.runs.context import ToolContext
from tools_app.runs.execution import argument_problem, execute

# A chatty handler must not grow the answer without bound.
MAX_NOTIFICATIONS = 1000
TEST_CALL_PROGRESS_TOKEN = "test-call"


@dataclass(frozen=True)
class TrialOutcome:
    result: dict[str, Any]
    notifications: list[dict[str, Any]]
    duration_ms: float

    @property
    def is_error(self) -> bool:
        return bool(self.result.get("isError"))


class RecordingLink:
    """A ``CallLink`` that keeps what the handler sends and has no client to ask anything."""

    progress_token: str | int | None = TEST_CALL_PROGRESS_TOKEN
    session_id = ""
    stream_id = ""
    request_id: str | int = TEST_CALL_PROGRESS_TOKEN
    log_level = "debug"
    on_cancel: Callable[[], Awaitable[Any]] | None = None
    stateless = False
    may_become_task = False
    protocol_version = ""

    def __init__(self) -> None:
        # No capabilities: handlers that ask for elicitation or sampling get ToolContext's
        # "the client does not support it" error, which becomes the call's isError result.
        self.client_capabilities: dict[str, Any] = {}
        self.client_info: dict[str, Any] = {"name": "toolbay test-call", "version": "1"}
        self.cancelled = asyncio.Event()
        self.notifications: list[dict[str, Any]] = []
        self.dropped = 0

    def log_enabled(self, level: str) -> bool:
        return True

    def input_responses(self) -> dict[str, Any]:
        return {}

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        if len(self.notifications) < MAX_NOTIFICATIONS:
            self.notifications.append({"method": method, "params": params})
        else:
            self.dropped += 1

    async def request(self, method: str, params: dict[str, Any], key: str | None = None) -> dict[str, Any]:
        raise ClientRequestError(f"a test call has no MCP client to answer {method}")

    async def close_stream(self) -> None:
        return None

    async def open_stream(self, run_id: str | None = None) -> str:
        return ""

    async def relay(self, after: str) -> Relayed:
        raise RuntimeError("a test call runs in this process; nothing is relayed")


async def _run(spec: ToolSpec, arguments: dict[str, Any]) -> TrialOutcome:
    link = RecordingLink()
    started = time.perf_counter()
    problem = argument_problem(spec, arguments)
    if problem is not None:
        result = problem
    else:
        # The operator who starts a test call is the person confirming it.
        result = await execute(spec, arguments, ToolContext(link, tool_name=spec.name, confirmation="none"))
    duration_ms = (time.perf_counter() - started) * 1000
    notifications = list(link.notifications)
    if link.dropped:
        notifications.append(
            {"method": "notifications/message", "params": {"level": "warning", "data": f"{link.dropped} more dropped"}}
        )
    return TrialOutcome(result=result, notifications=notifications, duration_ms=round(duration_ms, 3))


def tool_test_call(*, tool: Tool, arguments: dict[str, Any]) -> TrialOutcome:
    """Run ``tool`` once with ``arguments`` (disabled tools too: this is how one tries them)."""
    spec = ToolSpec.from_model(tool)
    cap = settings.TOOLBAY_TEST_CALL_TIMEOUT_SECONDS
    if spec.timeout_seconds > cap:
        spec = dataclasses.replace(spec, timeout_seconds=cap)
    return async_to_sync(_run)(spec, arguments)
