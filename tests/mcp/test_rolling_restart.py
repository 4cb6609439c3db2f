"""A rolling restart loses nothing: two servers behind a proxy are stopped (SIGTERM) and
started again one after the other while SDK clients keep calling, and no client sees an
error, every call gets its answer, and every call has its invocation row.

The clients speak 2025-11-25 through a failover proxy (tests/mcp/proxy.py). A server that
gets SIGTERM stops accepting connections, ends its SSE streams with a retry hint (the SDK
resumes them with Last-Event-ID, through the proxy, on the other server) and finishes the
calls it runs. soak/rolling_restart.py is the long version, with figures.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from audit.models import Invocation
from tenants.models import Tenant
from tenants.services import api_key_create, tenant_create
from tests.load import Tally, call_until_stopped
from tests.mcp.live import LiveServer, journal_drained, start_server, stop_together
from tests.mcp.proxy import FailoverProxy
from tests.poll import wait_for, wait_for_async
from tools_app.catalog.services import access_rule_grant_pattern

pytestmark = pytest.mark.live

SLUG = "live-rolling"
# soak/rolling_restart.py runs more clients through more rounds (each restarts both servers).
CLIENTS = int(os.environ.get("TOOLBAY_SOAK_CLIENTS", "4"))
ROUNDS = int(os.environ.get("TOOLBAY_SOAK_ROUNDS", "1"))
SERVER_ENV = {"TOOLBAY_HEARTBEAT_SECONDS": "0.5"}


@pytest.fixture
def world(live_world: Any, live_audit_writer: Any, django_db_blocker: Any) -> Iterator[str]:
    with django_db_blocker.unblock():
        tenant = tenant_create(slug=SLUG, name="Rolling restart")
        access_rule_grant_pattern(tenant=tenant, pattern="tag:demo")
        _, raw = api_key_create(tenant=tenant, name="rolling")
    yield raw
    with django_db_blocker.unblock():
        wait_for(journal_drained, timeout=30, message="the audit writer to write every journaled row")
        Tenant.objects.filter(slug=SLUG).delete()


def _http(key: str) -> httpx2.AsyncClient:
    limits = httpx2.Limits(max_keepalive_connections=0)  # one request per connection (the proxy's rule)
    return httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30, limits=limits)


def _restart(server: LiveServer, tmp: Path, name: str) -> LiveServer:
    server.process.send_signal(signal.SIGTERM)
    server.process.wait(30)
    return start_server(tmp, name, SERVER_ENV, port=int(server.url.rsplit(":", 1)[1]))


async def _more_answers(tally: Tally, count: int = 8) -> None:
    target = tally.answered + count
    await wait_for_async(
        lambda: tally.answered >= target, timeout=60, message=lambda: f"{target} answered calls ({tally.answered})"
    )


def test_rolling_restart_under_load_loses_nothing(orm, world, live_workers, tmp_path):
    servers = [start_server(tmp_path, "rolling-a", SERVER_ENV), start_server(tmp_path, "rolling-b", SERVER_ENV)]
    ports = [int(server.url.rsplit(":", 1)[1]) for server in servers]
    tally = Tally()
    try:
        with FailoverProxy(ports) as proxy:

            async def scenario() -> None:
                stop = asyncio.Event()
                url = f"{proxy.url}/mcp/{SLUG}"
                clients = [
                    asyncio.ensure_future(
                        call_until_stopped(url, _http(world), f"c{i}", stop, tally, countdown=3, count=4)
                    )
                    for i in range(CLIENTS)
                ]
                for turn in range(ROUNDS * len(servers)):
                    await _more_answers(tally)  # load on both servers before each restart
                    i = turn % len(servers)
                    servers[i] = await asyncio.to_thread(_restart, servers[i], tmp_path, f"rolling-{i}-{turn}")
                await _more_answers(tally)  # and on the restarted ones
                stop.set()
                await asyncio.gather(*clients)

            started = time.monotonic()
            asyncio.run(asyncio.wait_for(scenario(), 90 * ROUNDS))
            print(
                f"\nrolling restart: {ROUNDS * len(servers)} restarts, {CLIENTS} clients, "
                f"{tally.answered} calls answered, {len(tally.errors)} errors, "
                f"{proxy.retried} requests sent again by the proxy, {time.monotonic() - started:.1f} s"
            )
    finally:
        stop_together([server.process for server in servers], grace=15)
    assert tally.errors == []
    assert tally.answered >= 24
    # Every answered call has its row (the audit writer drains the journal), exactly once.
    wait_for(
        lambda: Invocation.objects.filter(tenant__slug=SLUG, kind="tool").count() >= tally.answered,
        timeout=30,
        message=lambda: f"{tally.answered} rows; have {Invocation.objects.filter(tenant__slug=SLUG).count()}",
    )
    rows = Invocation.objects.filter(tenant__slug=SLUG, kind="tool").count()
    print(f"audit rows: {rows} for {tally.answered} answered calls")
    assert rows == tally.answered
