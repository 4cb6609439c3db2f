"""A small raw MCP-over-HTTP client for tests that look at status codes, headers and SSE."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

ACCEPT_BOTH = "application/json, text/event-stream"
INIT_PARAMS = {
    "protocolVersion": "2025-11-25",
    "capabilities": {"elicitation": {}, "sampling": {}},
    "clientInfo": {"name": "toolbay-tests", "version": "1.0"},
}


def headers(key: str | None = None, session: str | None = None, **extra: str) -> dict[str, str]:
    result = {"Accept": ACCEPT_BOTH, "Content-Type": "application/json"}
    if key:
        result["Authorization"] = f"Bearer {key}"
    if session:
        result["Mcp-Session-Id"] = session
    result.update(extra)
    return result


def rpc(method: str, params: dict[str, Any] | None = None, id: Any = 1) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def note(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    return message


@dataclass
class SseEvent:
    id: str | None
    data: str
    retry: int | None = None

    @property
    def message(self) -> dict[str, Any] | None:
        return json.loads(self.data) if self.data else None


def parse_sse(lines: list[str]) -> list[SseEvent]:
    events, current = [], {"id": None, "data": [], "retry": None}
    for line in lines:
        if line == "":
            if current["data"] or current["id"] is not None:
                events.append(SseEvent(current["id"], "\n".join(current["data"]), current["retry"]))
            current = {"id": None, "data": [], "retry": None}
        elif line.startswith(":"):
            continue
        else:
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "id":
                current["id"] = value
            elif name == "data":
                current["data"].append(value)
            elif name == "retry":
                current["retry"] = int(value)
    return events


class Pending:
    """A request in flight on a thread, while the test watches the server act on it."""

    def __init__(self, send: Callable[[], httpx.Response]) -> None:
        self._response: httpx.Response | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(send,), daemon=True)
        self._thread.start()

    def _run(self, send: Callable[[], httpx.Response]) -> None:
        try:
            self._response = send()
        except BaseException as exc:  # handed to the test by response()
            self._error = exc

    def response(self, timeout: float = 60) -> httpx.Response:
        """The HTTP response, once the server has finished it."""
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"no response within {timeout} s"
        if self._error is not None:
            raise self._error
        assert self._response is not None
        return self._response


@dataclass
class McpSession:
    """An initialized session on one endpoint, with helpers for the usual calls."""

    client: httpx.Client
    endpoint: str
    key: str | None
    session_id: str = ""
    version: str = "2025-11-25"
    next_id: int = field(default=1)

    @classmethod
    def open(cls, client: httpx.Client, endpoint: str, key: str | None, version: str = "2025-11-25") -> McpSession:
        params = dict(INIT_PARAMS, protocolVersion=version)
        response = client.post(endpoint, json=rpc("initialize", params, id=0), headers=headers(key))
        assert response.status_code == 200, response.text
        session = cls(
            client, endpoint, key, response.headers["mcp-session-id"], response.json()["result"]["protocolVersion"]
        )
        ack = session.post(note("notifications/initialized"))
        assert ack.status_code == 202, ack.text
        return session

    def headers(self, **extra: str) -> dict[str, str]:
        return headers(self.key, self.session_id, **{"MCP-Protocol-Version": self.version, **extra})

    def post(self, body: Any, **extra: str) -> httpx.Response:
        return self.client.post(self.endpoint, json=body, headers=self.headers(**extra))

    def post_in_thread(self, body: Any) -> Pending:
        """Send ``body`` on a thread; ``.response()`` waits for the answer."""
        return Pending(lambda: self.post(body))

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Send a request and return the response message (from JSON or the SSE stream)."""
        self.next_id += 1
        response = self.post(rpc(method, params, id=self.next_id))
        assert response.status_code == 200, response.text
        if response.headers["content-type"].startswith("application/json"):
            return response.json()
        for event in parse_sse(response.text.split("\n")):
            if event.message and event.message.get("id") == self.next_id and "method" not in event.message:
                return event.message
        raise AssertionError(f"no response in stream: {response.text}")
