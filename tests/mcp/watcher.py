"""A client's standalone GET stream, read in a thread, and the list_changed events it heard."""

from __future__ import annotations

import threading
from typing import ClassVar

import httpx

from mcp_platform.mcp import names
from mcp_platform.redis_clients import sync_redis
from tests.mcp.wire import McpSession, SseEvent, parse_sse
from tests.poll import wait_for

LIST_CHANGED = "notifications/tools/list_changed"


class Watcher:
    """A client's standalone GET stream, read in a thread.

    A new stream is ready once the server has registered it for catalog changes: it then
    records the visible-tools fingerprint the session was told about (its digest key). A
    change made before that would reach no stream, and on a first connection there is no
    earlier fingerprint to compare with, so the session would never hear of it.
    """

    opened_by_test: ClassVar[list[Watcher]] = []

    def __init__(self, session: McpSession, **headers: str) -> None:
        self.opened_by_test.append(self)
        self.session = session
        self.events: list[SseEvent] = []
        self.closed = threading.Event()
        self.opened = threading.Event()
        self._headers = headers
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        assert self.opened.wait(10), "GET stream did not open"
        if "Last-Event-ID" not in headers:
            digest = names.session_digest_key(session.session_id)
            wait_for(
                lambda: sync_redis().exists(digest),
                message=lambda: f"the server to register the GET stream (HTTP {getattr(self, 'status', None)})",
            )

    def _read(self) -> None:
        lines: list[str] = []
        headers = self.session.headers(Accept="text/event-stream", **self._headers)
        self._client = httpx.Client(timeout=httpx.Timeout(5, read=60))
        try:
            with self._client.stream("GET", self.session.endpoint, headers=headers) as response:
                self.status = response.status_code
                self.opened.set()
                for line in response.iter_lines():
                    lines.append(line)
                    if line == "":
                        self.events = parse_sse(lines)
        except (httpx.HTTPError, RuntimeError):
            pass  # stop() closed the connection under us
        finally:
            self.opened.set()
            self.closed.set()

    def close(self) -> None:
        """The client drops the stream (the session lives on); the reading thread ends at
        the next line the server sends (keep-alive comments come every second)."""
        self._client.close()

    def stop(self) -> None:
        """close(), and wait until the stream has ended."""
        self.close()
        assert self.closed.wait(5)

    def changes(self) -> int:
        return sum(1 for e in self.events if e.message and e.message.get("method") == LIST_CHANGED)

    def wait_changes(self, count: int) -> None:
        wait_for(
            lambda: self.changes() >= count,
            message=lambda: f"{count} list_changed on the stream (got {self.changes()})",
        )
