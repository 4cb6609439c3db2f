"""Handlers that exist only for tests; loaded by TOOLBAY_HANDLER_MODULES (tests/settings.py)."""

from __future__ import annotations

import time
from typing import Any

import redis
from django.conf import settings

from tools_app.backends.base import BackendError
from tools_app.handlers import EVERY_CATALOG, resource_handler, tool_handler


@tool_handler("testing.stubborn")
def stubborn(ctx: Any, arguments: dict[str, Any]) -> str:
    """Blocking code that ignores cancellation: only killing its process stops it."""
    time.sleep(arguments.get("seconds", 30))  # blocking work (behaviour under test): not a wait
    return "stubborn finished"


@tool_handler("testing.flaky")
async def flaky(ctx: Any, arguments: dict[str, Any]) -> str:
    """Fails transiently ``fails`` times (counted in Redis under ``key``), then succeeds."""
    attempts = redis.Redis.from_url(settings.REDIS_URL).incr(f"test:flaky:{arguments['key']}")
    if attempts <= arguments["fails"]:
        raise BackendError(f"transient failure {attempts}", retryable=True)
    return f"succeeded on attempt {attempts}"


@tool_handler("testing.crash")
async def crash(ctx: Any, arguments: dict[str, Any]) -> str:
    """A bug in a handler: an exception nobody meant to raise."""
    raise RuntimeError("unexpected bug with a secret detail inside")


# A tenant-private tool uses it (tests/audit/test_live_approvals.py).
@tool_handler("testing.record_run", catalogs=EVERY_CATALOG)
async def record_run(ctx: Any, arguments: dict[str, Any]) -> str:
    """Counts every run of the call under ``key`` in Redis: the confirmation tests check that
    a call nobody confirmed never reached its backend."""
    redis.Redis.from_url(settings.REDIS_URL).rpush(f"test:runs:{arguments['key']}", "ran")
    return f"ran {arguments['key']}"


@tool_handler("testing.unencodable")
async def unencodable(ctx: Any, arguments: dict[str, Any]) -> str:
    """Text no UTF-8 can carry (a lone surrogate) and a NUL, as careless code produces them."""
    return "lone \udc80 and nul \x00 end"


@tool_handler("testing.loop_blocker")
async def loop_blocker(ctx: Any, arguments: dict[str, Any]) -> str:
    """A coroutine that blocks its event loop: the worker cannot enforce its timeout."""
    time.sleep(arguments.get("seconds", 10))  # blocking the loop is the behaviour under test
    return "loop blocker finished"


@tool_handler("testing.acme_only", catalogs=("acme",))
async def acme_only(ctx: Any, arguments: dict[str, Any]) -> str:
    """Offered to the platform catalog and acme's only (tests/*/test_handler_catalogs.py)."""
    return "for acme"


@resource_handler("testing.platform_rows")
async def platform_rows(uri: str, variables: dict[str, str]) -> str:
    """A resource handler only the platform catalog may bind (the default)."""
    return f"rows of {uri}"


@tool_handler("testing.arguments", catalogs=EVERY_CATALOG)
async def arguments_received(ctx: Any, arguments: dict[str, Any]) -> dict[str, Any]:
    """Answers with exactly the arguments its backend call received (tests/mcp/test_curation_live.py)."""
    return {"received": arguments, "tool_name": ctx.tool_name}
