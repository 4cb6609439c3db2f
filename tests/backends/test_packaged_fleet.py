"""Soak (``make soak``, soak/packaged_fleet.py): N tenants each with an instance of the same
packaged server on this machine. One platform server (``mcp-server-time``) is granted to N
tenants; each tenant's first call starts its own instance. Reported: memory per instance, cold
start (first call, as the client sees it, and as the runner measured it), warm call latency,
and how long idle instances take to be reclaimed (``TOOLBAY_PACKAGED_IDLE_SECONDS``).

Skipped unless ``TOOLBAY_PACKAGED_FLEET`` (the number of tenants) is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import time
from typing import Any

import httpx2
import pytest
from django.test import override_settings
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client

from tenants.services import api_key_create, tenant_create
from tests.backends.packaged import PACKAGE_CACHE, TIME_PACKAGE, instance_status, start_runner
from tests.mcp.live import start_server, stop_together
from tests.poll import wait_for
from tools_app.backends.packaged.launch import install_server
from tools_app.backends.upstream.federation import upstream_refresh
from tools_app.backends.upstream.models import UpstreamServer
from tools_app.catalog.services import access_rule_grant_pattern

TENANTS = int(os.environ.get("TOOLBAY_PACKAGED_FLEET", "0"))
# Longer than starting the whole fleet one by one (~1.3 s each here), so no instance goes idle before
# every one has been measured.
IDLE_SECONDS = 180
WARM_CALLS = 10

pytestmark = [
    pytest.mark.live,
    pytest.mark.timeout(1800),
    pytest.mark.skipif(not TENANTS, reason="set TOOLBAY_PACKAGED_FLEET=50 (make soak)"),
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]


def _mib(value: float) -> str:
    return f"{value / 2**20:.1f} MiB"


def _ms(values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[max(0, int(len(ordered) * 0.95) - 1)]
    return (
        f"median {statistics.median(ordered) * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms, max {ordered[-1] * 1000:.1f} ms"
    )


def test_a_fleet_of_tenant_instances(django_db_setup: Any, django_db_blocker: Any, tmp_path: Any) -> None:
    runner = start_runner(
        tmp_path,
        extra_env={"TOOLBAY_PACKAGED_IDLE_SECONDS": str(IDLE_SECONDS), "TOOLBAY_PACKAGED_MAX_INSTANCES": "500"},
    )
    server = None
    try:
        with django_db_blocker.unblock(), override_settings(TOOLBAY_PACKAGE_CACHE=str(PACKAGE_CACHE)):
            platform = UpstreamServer(
                name="fleet-time",
                kind="pypi",
                package=TIME_PACKAGE[0],
                version=TIME_PACKAGE[1],
                tool_prefix="fleet.",
                tags=["fleet"],
                publish_new_tools=True,
            )
            platform.full_clean()
            platform.save()
            install_server(platform)
            upstream_refresh(upstream_id=platform.pk)
            tenants: list[tuple[int, str, str]] = []
            for index in range(TENANTS):
                tenant = tenant_create(slug=f"fleet-{index}", name=f"Fleet {index}")
                access_rule_grant_pattern(tenant=tenant, pattern="tag:fleet")
                _, key = api_key_create(tenant=tenant, name="fleet")
                tenants.append((tenant.pk, tenant.slug, key))
        server = start_server(tmp_path, "toolbay-fleet")
        # The refresh above started the platform's own (tenant 0) instance: not one of the fleet.
        cold: list[float] = []
        warm: list[float] = []
        statuses: list[dict[str, Any]] = []

        async def fleet() -> float:
            async with contextlib.AsyncExitStack() as stack:  # sessions end in reverse order (anyio)
                return await calls(stack)

        async def calls(stack: contextlib.AsyncExitStack) -> float:
            clients = []
            for tenant_id, slug, key in tenants:  # one cold start at a time: each measured alone
                http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=120)
                client = Client(streamable_http_client(server.endpoint(slug), http_client=http), mode="legacy")
                clients.append(await stack.enter_async_context(client))
                start = time.perf_counter()
                result = await client.call_tool("fleet.get_current_time", {"timezone": "UTC"})
                cold.append(time.perf_counter() - start)
                assert result.is_error is False, result
                status = await asyncio.to_thread(instance_status, platform.pk, tenant_id)
                assert status is not None and status["state"] == "running", status
                statuses.append(status)
            for _ in range(WARM_CALLS):  # every instance warm: round after round over the fleet
                for client in clients:
                    start = time.perf_counter()
                    result = await client.call_tool("fleet.get_current_time", {"timezone": "UTC"})
                    warm.append(time.perf_counter() - start)
                    assert result.is_error is False
            return time.perf_counter()

        began = time.perf_counter()
        last_call = asyncio.run(fleet())
        elapsed = time.perf_counter() - began
        pids = {s["pid"] for s in statuses}
        assert len(statuses) == len(pids) == TENANTS  # one instance per tenant, none shared
        memory = [float(s["memory"]) for s in statuses]
        runner_cold = [float(s["cold_start_seconds"]) for s in statuses]
        wait_for(
            lambda: all(instance_status(platform.pk, tenant_id) is None for tenant_id, _, _ in tenants),
            timeout=IDLE_SECONDS + 120,
            interval=0.5,
            message="every idle instance to be reclaimed",
        )
        reclaimed_after = time.perf_counter() - last_call
        print(
            f"\n{TENANTS} tenants, one instance each of {'=='.join(TIME_PACKAGE)} "
            f"(started one after another, then {WARM_CALLS} rounds of calls: {elapsed:.1f} s)\n"
            f"  memory per instance: median {_mib(statistics.median(memory))}, max {_mib(max(memory))}, "
            f"total {_mib(sum(memory))}\n"
            f"  cold start, first call as the client sees it: {_ms(cold)}\n"
            f"  cold start, as the runner measured it (install check, spawn, handshake): {_ms(runner_cold)}\n"
            f"  warm call latency ({WARM_CALLS} per tenant, all {TENANTS} instances up): {_ms(warm)}\n"
            f"  idle reclaim: all {TENANTS} stopped {reclaimed_after:.1f} s after their last call "
            f"(TOOLBAY_PACKAGED_IDLE_SECONDS={IDLE_SECONDS})"
        )
    finally:
        if server is not None:
            stop_together([server.process], grace=10)
        runner.stop()
