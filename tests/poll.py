"""Waiting in tests: poll something observable until it holds, never sleep and hope.

A test that waits for another process (a server, a worker, Redis, the database) polls the
condition it needs - a row exists, a Redis key appears, a stream delivered an event - and
goes on the moment it holds. Under load it waits longer, unloaded it waits not at all; a
fixed sleep is too long on a quiet machine and too short on a busy one.

    run = wait_for(lambda: ToolRun.objects.filter(pk=run_id).first(), message="the run's row")
    await wait_for_async(lambda: redis.exists(key), timeout=5, message=f"{key} in Redis")

``wait_for_async`` also accepts a condition that returns an awaitable (e.g. an async
function), awaited on every poll.

Proving a negative (nothing arrives during a window) is ``holds_for``: it watches the
condition for the whole window and fails the moment it breaks.

    holds_for(lambda: watcher.changes() == 1, duration=0.5, message="one list_changed, no more")

Sleeping stays right only where the wait *is* the behaviour under test: a timeout elapsing,
a test handler simulating slow work. Such sleeps say so in a comment.
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
        time.sleep(min(interval, remaining))  # the one pause between polls of a synchronous wait


def holds_for(
    condition: Callable[[], object],
    *,
    duration: float,
    interval: float = DEFAULT_INTERVAL,
    message: Message = "",
) -> None:
    """Check ``condition`` every ``interval`` seconds for ``duration`` seconds (a negative to
    prove: no stray event arrives meanwhile); fail at once, with ``message``, when it stops
    holding. The condition is always checked at the start and once more at the end."""
    try:
        wait_for(lambda: not condition(), timeout=duration, interval=interval)
    except WaitTimeout:
        return  # it held for the whole window
    what = message() if callable(message) else message
    raise AssertionError(f"stopped holding within {duration:g} s: {what or _name(condition)}")


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
        await asyncio.sleep(min(interval, remaining))  # the one pause between polls of an async wait


def _failure(
    condition: Callable[..., object], timeout: float, message: Message, last: object, error: BaseException | None
) -> str:
    what = message() if callable(message) else message
    if not what:
        what = _name(condition)
    seen = f"last error: {error!r}" if error is not None else f"last value: {last!r}"
    separator = "\n" if "\n" in what else " "  # a log in the message: the detail goes below it
    return f"timed out after {timeout:g} s waiting for {what}{separator}({seen})"


def _name(condition: Callable[..., object]) -> str:
    code = getattr(condition, "__code__", None)
    where = f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""
    return f"{getattr(condition, '__qualname__', repr(condition))}{where}"
