"""Finding (and starting) a packaged server's instance, from any process.

Runners (``manage.py run_packaged``) own instances; everything else learns about them from
Redis:

- ``toolbay:packaged:instance:<scope>`` — JSON status of one instance, written by the runner
  that holds it and expiring unless renewed (a dead runner's instances vanish within
  ``STATUS_TTL_SECONDS``): ``state`` (starting, running, crashed, failed), ``url`` and
  ``token`` of its Streamable HTTP endpoint on the runner, ``runner``, ``pid``, ``memory``,
  ``started_at``, ``restarts``, ``last_error``, ``retry_at``.
- ``toolbay:packaged:wanted`` — a list of start requests (``{"upstream", "tenant", "user"}``)
  that every runner pops; the one that takes the instance's lease starts it.
- ``toolbay:packaged:runner:<id>`` — a runner's heartbeat (its sandbox status), for /readyz.

A scope is ``<upstream id>:<tenant id>`` (one instance per server and tenant) or
``<upstream id>:<tenant id>:<user>`` for servers marked per user. Two tenants never share an
instance, also of a platform server.

The call path reads one Redis key per instance and caches the answer; a cold start polls
until the runner reports the instance running (``TOOLBAY_PACKAGED_START_SECONDS``).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace
from typing import Any

from django.conf import settings

from mcp_platform.redis_clients import async_redis
from tools_app.backends.upstream.client import InstanceRestarting, UpstreamEndpoint, UpstreamUnavailable
from tools_app.backends.upstream.federation import register_instance_locator

PREFIX = "toolbay:packaged"
WANTED_KEY = f"{PREFIX}:wanted"
STATUS_TTL_SECONDS = 30
# A located instance is trusted this long before its status is read again (a stopped one is
# noticed sooner: its runner answers 404 and the call asks again).
CACHE_SECONDS = 15.0
POLL_SECONDS = 0.05
# A start request is repeated this often while a cold start is awaited (a runner that popped
# it may have died).
ASK_AGAIN_SECONDS = 5.0
MAX_WANTED = 10_000


def scope_of(upstream_id: int, tenant_id: int, user: str | None) -> str:
    return f"{upstream_id}:{tenant_id}" + (f":{user}" if user else "")


def status_key(scope: str) -> str:
    return f"{PREFIX}:instance:{scope}"


def lease_key(scope: str) -> str:
    return f"{PREFIX}:lease:{scope}"


RUNNERS_KEY = f"{PREFIX}:runners"  # sorted set: runner id -> last heartbeat (unix time)
RUNNER_ALIVE_SECONDS = 30


def runner_key(runner_id: str) -> str:
    return f"{PREFIX}:runner:{runner_id}"


def control_key(runner_id: str) -> str:
    return f"{PREFIX}:control:{runner_id}"


class InstanceUnavailable(UpstreamUnavailable):
    """The instance cannot take calls now (starting too slowly, crashed and backing off, or
    refused); the message says why and is safe to show."""


_cache: dict[str, tuple[float, UpstreamEndpoint]] = {}
_starting: dict[str, asyncio.Future[UpstreamEndpoint]] = {}


def forget(endpoint: UpstreamEndpoint) -> None:
    cached = _cache.get(endpoint.scope)
    if cached is not None and cached[1] == endpoint:
        del _cache[endpoint.scope]


def clear_cache() -> None:
    _cache.clear()


def _endpoint(base: UpstreamEndpoint, scope: str, status: dict[str, Any]) -> UpstreamEndpoint:
    token = str(status["token"])
    return replace(
        base,
        url=str(status["url"]),
        headers=(("Authorization", f"Bearer {token}"),),
        secret_values=(token,),
        scope=scope,
        internal=True,
    )


async def read_status(scope: str) -> dict[str, Any] | None:
    raw = await async_redis().get(status_key(scope))
    if raw is None:
        return None
    try:
        status = json.loads(raw)
    except ValueError:
        return None
    return status if isinstance(status, dict) else None


async def live_runners() -> list[dict[str, Any]]:
    """The heartbeats of the runners seen in the last ``RUNNER_ALIVE_SECONDS``."""
    redis = async_redis()
    ids = await redis.zrangebyscore(RUNNERS_KEY, time.time() - RUNNER_ALIVE_SECONDS, "+inf")
    if not ids:
        return []
    raws = await redis.mget([runner_key(i.decode() if isinstance(i, bytes) else str(i)) for i in ids])
    runners = []
    for raw in raws:
        if raw is not None:
            with_json = json.loads(raw)
            if isinstance(with_json, dict):
                runners.append(with_json)
    return runners


async def ask_start(upstream_id: int, tenant_id: int, user: str | None) -> None:
    redis = async_redis()
    await redis.rpush(WANTED_KEY, json.dumps({"upstream": upstream_id, "tenant": tenant_id, "user": user}))
    # Requests nobody took (every runner full) must not pile up: the newest ones are enough.
    await redis.ltrim(WANTED_KEY, -MAX_WANTED, -1)


async def locate(endpoint: UpstreamEndpoint, *, tenant_id: int, user: str | None) -> UpstreamEndpoint:
    """The running instance of ``endpoint``'s packaged server for this scope; raises
    InstanceUnavailable or InstanceRestarting (clean, retryable failures of the call)."""
    scope = scope_of(endpoint.id, tenant_id, user)
    cached = _cache.get(scope)
    now = time.monotonic()
    if cached is not None and cached[0] > now and cached[1].name == endpoint.name:
        return cached[1]
    pending = _starting.get(scope)
    if pending is None:
        # One lookup per scope per process; concurrent callers share it.
        pending = _starting[scope] = asyncio.ensure_future(_locate(endpoint, scope, tenant_id, user))
        pending.add_done_callback(lambda _: _starting.pop(scope, None))
    return await asyncio.shield(pending)


async def _locate(endpoint: UpstreamEndpoint, scope: str, tenant_id: int, user: str | None) -> UpstreamEndpoint:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + settings.TOOLBAY_PACKAGED_START_SECONDS
    asked_at: float | None = None
    while True:
        status = await read_status(scope)
        state = status.get("state") if status else None
        if status is not None and state == "running":
            located = _endpoint(endpoint, scope, status)
            _cache[scope] = (time.monotonic() + CACHE_SECONDS, located)
            return located
        if status is not None and state == "failed":
            raise InstanceUnavailable(f"packaged server {endpoint.name} cannot run: {status.get('last_error', '')}")
        if status is not None and state == "crashed":
            wait = float(status.get("retry_at", 0)) - time.time()
            if wait > 0:
                raise InstanceRestarting(
                    f"packaged server {endpoint.name} stopped ({status.get('last_error') or 'it exited'}); "
                    f"it is restarted on a call in {wait:.0f} s or later",
                    retry_in=wait,
                )
        if state != "starting" and (asked_at is None or loop.time() - asked_at > ASK_AGAIN_SECONDS):
            if not await live_runners():
                raise InstanceUnavailable(
                    f"packaged server {endpoint.name} cannot start: no runner is running (manage.py run_packaged)"
                )
            await ask_start(endpoint.id, tenant_id, user)
            asked_at = loop.time()
        if loop.time() > deadline:
            raise InstanceUnavailable(
                f"packaged server {endpoint.name} did not start within {settings.TOOLBAY_PACKAGED_START_SECONDS:.0f} s"
            )
        await asyncio.sleep(POLL_SECONDS)


register_instance_locator(locate, forget)
