"""Input hygiene and fair shares at the edge of the engine.

``InputLimits.check`` refuses, before any work, a request whose JSON nests deeper or holds
a longer string than the deployment allows (orjson alone parses up to 1,024 levels and any
string the body can hold). ``InFlight`` caps the requests one session has running in this
process at once, so a single client cannot take every connection, task and slot a
process has: the cap guards this process's resources, so it is counted where they are.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from mcp_platform.mcp.jsonrpc import INVALID_REQUEST, JsonRpcError


@dataclass(frozen=True)
class InputLimits:
    max_depth: int
    max_string_chars: int
    max_batch_requests: int
    # Requests of one batch that run at once (the rest wait their turn inside the batch).
    batch_concurrency: int
    # Requests (a batch is one) a session may have running in one process at once.
    session_max_in_flight: int

    def check(self, body: bytes, payload: Any) -> None:
        """Raise JsonRpcError(-32600) when ``payload`` (parsed from ``body``) nests deeper than
        ``max_depth`` containers or holds a string (or key) longer than ``max_string_chars``."""
        # Cheap bounds on the raw bytes first: a body with fewer brackets than the depth
        # limit cannot nest deeper, one shorter than the string limit holds no longer
        # string, and then nothing is walked (every ordinary request).
        deep = body.count(b"[") + body.count(b"{") > self.max_depth
        long = len(body) > self.max_string_chars
        if deep or long:
            _walk(payload, self.max_depth, self.max_string_chars)

    def check_batch(self, size: int) -> None:
        if size > self.max_batch_requests:
            raise JsonRpcError(
                INVALID_REQUEST,
                f"Invalid Request: a batch may hold at most {self.max_batch_requests} messages, got {size}",
                http_status=400,
            )


def _walk(value: Any, max_depth: int, max_chars: int) -> None:
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if len(item) > max_chars:
                raise _too_long(max_chars)
            continue
        if isinstance(item, dict):
            children: Any = item.values()
            if any(len(key) > max_chars for key in item):
                raise _too_long(max_chars)
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth >= max_depth:
            raise JsonRpcError(
                INVALID_REQUEST, f"Invalid Request: JSON nested deeper than {max_depth} levels", http_status=400
            )
        stack.extend((child, depth + 1) for child in children)


def _too_long(max_chars: int) -> JsonRpcError:
    return JsonRpcError(
        INVALID_REQUEST, f"Invalid Request: a string is longer than {max_chars} characters", http_status=400
    )


class InFlight:
    """Requests running per session in this process."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._running: defaultdict[str, int] = defaultdict(int)

    @contextmanager
    def enter(self, session_id: str) -> Iterator[bool]:
        """Yields whether the request may run; counts it while it does."""
        if self._running.get(session_id, 0) >= self.limit:
            yield False
            return
        self._running[session_id] += 1
        try:
            yield True
        finally:
            self._running[session_id] -= 1
            if not self._running[session_id]:
                del self._running[session_id]

    def running(self, session_id: str) -> int:
        return self._running.get(session_id, 0)
