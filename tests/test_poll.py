"""The poll helper the live tests wait with."""

from __future__ import annotations

import itertools
import time

import pytest

from tests.poll import WaitTimeout, holds_for, wait_for, wait_for_async


def test_returns_the_first_truthy_value():
    values = iter([None, 0, "", "ready", "later"])
    assert wait_for(lambda: next(values), interval=0) == "ready"


def test_fails_the_test_with_the_message_and_the_last_value():
    started = time.monotonic()
    with pytest.raises(WaitTimeout) as excinfo:
        wait_for(lambda: [], timeout=0.1, interval=0.01, message="the row to appear")
    assert time.monotonic() - started < 2
    assert isinstance(excinfo.value, AssertionError)
    assert str(excinfo.value) == "timed out after 0.1 s waiting for the row to appear (last value: [])"


def test_without_a_message_the_condition_is_named():
    def server_ready() -> bool:
        return False

    with pytest.raises(WaitTimeout, match=r"waiting for .*server_ready \(.*test_poll.py:\d+\)"):
        wait_for(server_ready, timeout=0)


def test_a_message_can_be_built_on_failure_only():
    built = []

    def log() -> str:
        built.append(1)
        return "the server; its log:\nline 1"

    assert wait_for(lambda: True, message=log)
    assert built == []
    with pytest.raises(WaitTimeout, match="its log:\nline 1\n\\(last value: False\\)"):
        wait_for(lambda: False, timeout=0, message=log)


def test_checks_once_even_without_time():
    assert wait_for(lambda: 42, timeout=0) == 42


def test_ignored_exceptions_mean_not_yet_others_propagate():
    attempts = itertools.count()

    def flaky() -> int:
        if next(attempts) < 2:
            raise ConnectionError("refused")
        return 7

    assert wait_for(flaky, interval=0, ignore=(ConnectionError,)) == 7
    with pytest.raises(WaitTimeout, match="last error: ConnectionError") as excinfo:
        wait_for(_refuse, timeout=0.05, interval=0.01, ignore=(ConnectionError,))
    assert isinstance(excinfo.value.__cause__, ConnectionError)
    with pytest.raises(RuntimeError, match="died"):
        wait_for(_die, ignore=(ConnectionError,))


def _refuse() -> None:
    raise ConnectionError("refused")


def _die() -> None:
    raise RuntimeError("the process died")


async def test_async_twin_awaits_async_conditions():
    values = iter([False, False, "done"])

    async def check() -> object:
        return next(values)

    assert await wait_for_async(check, interval=0) == "done"
    assert await wait_for_async(lambda: "sync too") == "sync too"

    async def never() -> bool:
        return False

    with pytest.raises(WaitTimeout, match="the event"):
        await wait_for_async(never, timeout=0.05, interval=0.01, message="the event")


def test_holds_for_watches_the_whole_window():
    calls = itertools.count()
    started = time.monotonic()
    holds_for(lambda: next(calls) >= 0, duration=0.2, interval=0.01)
    assert time.monotonic() - started >= 0.2
    assert next(calls) > 2  # checked all along, not once at the end


def test_holds_for_fails_the_moment_the_condition_breaks():
    calls = itertools.count()
    started = time.monotonic()
    with pytest.raises(AssertionError, match=r"stopped holding within 5 s: no second event"):
        holds_for(lambda: next(calls) < 3, duration=5, interval=0.01, message="no second event")
    assert time.monotonic() - started < 2
