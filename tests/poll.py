"""Waiting in tests: poll something observable until it holds, never sleep and hope.

A test that waits for another process (a server, a worker, Redis, the database) polls the
condition it needs - a row exists, a Redis key appears, a stream delivered an event - and
goes on the moment it holds. Under load it waits longer, unloaded it waits not at all; a
fixed sleep is too long on a quiet machine and too short on a busy one.

    run = wait_for(lambda: ToolRun.objects.filter(pk=run_id).first(), message="the run's row")
    await wait_for_async(lambda: redis.exists(key), timeout=5, message=f"{key} in Redis")

``wait_for_async`` also accepts a condition that returns an awaitable (e.g. an async
function), awaited on every poll.

Sleeping stays right only where the wait *is* the behaviour under test: proving that
nothing arrives during a window, a timeout elapsing, a test handler simulating slow work.
Such sleeps say so in a comment.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

DEFAULT_TIMEOUT = 10.0
DEFAULT_INTERVAL = 0.05

Message = str | Callable[[], str]


class WaitTimeout(AssertionError):
    """The condition did not hold in time (an AssertionError: the test fails, not errors)."""


def wait_for(
    condition: Callable[[], T],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    interval: float = DEFAULT_INTERVAL,
    message: Message = "",
    ignore: tuple[type[BaseException], ...] = (),
) -> T:
    """Call ``condition`` every ``interval`` seconds until it returns a truthy value, and
    return that value. After ``timeout`` seconds fail with ``message`` (a string, or a
    callable building one only on failure, e.g. to include a server's log) and the last
    value seen. The condition is always checked at least once, and once more at the deadline.

    Exceptions of the ``ignore`` types count as "not yet" (e.g. a connection refused while a
    server starts); any other exception propagates at once (e.g. "the process died").
    """
    deadline = time.monotonic() + timeout
    last: object = None
    error: BaseException | None = None
    while True:
        try:
            value = condition()
        except ignore as exc:
            error, last = exc, None
        else:
            if value:
                return value
            error, last = None, value
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise WaitTimeout(_failure(condition, timeout, message, last, error)) from error
        time.sleep(min(interval, remaining))


async def wait_for_async(
    condition: Callable[[], T | Awaitable[T]],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    interval: float = DEFAULT_INTERVAL,
    message: Message = "",
    ignore: tuple[type[BaseException], ...] = (),
) -> T:
    """``wait_for`` for async tests: the event loop keeps running between polls."""
    deadline = time.monotonic() + timeout
    last: object = None
    error: BaseException | None = None
    while True:
        try:
            value = condition()
            if inspect.isawaitable(value):
                value = await value
        except ignore as exc:
            error, last = exc, None
        else:
            if value:
                return value  # type: ignore[return-value]
            error, last = None, value
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise WaitTimeout(_failure(condition, timeout, message, last, error)) from error
        await asyncio.sleep(min(interval, remaining))


def _failure(
    condition: Callable[..., object], timeout: float, message: Message, last: object, error: BaseException | None
) -> str:
    what = message() if callable(message) else message
    if not what:
        code = getattr(condition, "__code__", None)
        where = f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""
        what = f"{getattr(condition, '__qualname__', repr(condition))}{where}"
    seen = f"last error: {error!r}" if error is not None else f"last value: {last!r}"
    separator = "\n" if "\n" in what else " "  # a log in the message: the detail goes below it
    return f"timed out after {timeout:g} s waiting for {what}{separator}({seen})"
