"""Tenant call limits hold across server processes."""

from __future__ import annotations

import time

import pytest

from audit.models import Invocation
from mcp_platform.redis_clients import sync_redis
from tenants.models import Tenant
from tenants.services import api_key_create, tenant_create
from tests.mcp.wire import McpSession, note, rpc
from tests.poll import wait_for
from tools_app.catalog.services import access_rule_grant_pattern
from tools_app.runs import limits

pytestmark = pytest.mark.live


def _tenant(slug: str, **limits: int) -> tuple[Tenant, str]:
    tenant = tenant_create(slug=slug, name=slug)
    for name, value in limits.items():
        setattr(tenant, name, value)
    tenant.save()
    access_rule_grant_pattern(tenant=tenant, pattern="tag:demo")
    return tenant, api_key_create(tenant=tenant, name="limited")[1]


def _running(tenant: Tenant) -> int:
    """The tenant's concurrency slots taken, as every server process sees them."""
    return int(sync_redis().get(f"{limits.PREFIX}:running:{tenant.pk}") or 0)


def test_calls_per_minute_across_processes(orm, http, server, other_server, live_world):
    tenant, key = _tenant("live-rate", calls_per_minute=3)
    first = McpSession.open(http, server.endpoint("live-rate"), key)
    second = McpSession.open(http, other_server.endpoint("live-rate"), key)
    # The allowance is counted per clock minute: start early enough in one that all four
    # calls fall into it.
    wait_for(lambda: time.time() % 60 < 50, timeout=15, message="the clock to be early in a minute")
    answers = [s.request("tools/call", {"name": "echo", "arguments": {"text": "x"}}) for s in (first, second, first)]
    assert all("result" in a for a in answers)
    refused = second.request("tools/call", {"name": "echo", "arguments": {"text": "x"}})
    assert refused["error"]["code"] == -32000
    assert "3 calls per minute" in refused["error"]["message"]
    denied = Invocation.objects.filter(tenant=tenant, outcome="denied")
    wait_for(denied.exists, message="the refused call's invocation row")
    assert denied.count() == 1
    assert first.request("ping")["result"] == {}  # other methods are not limited


def test_max_concurrent_calls(orm, http, server, other_server, live_world):
    tenant, key = _tenant("live-busy", max_concurrent_calls=1)
    busy = McpSession.open(http, server.endpoint("live-busy"), key)
    other = McpSession.open(http, other_server.endpoint("live-busy"), key)
    # A long call (100 steps of 0.2 s) holds the tenant's one slot until it is cancelled.
    pending = busy.post_in_thread(rpc("tools/call", {"name": "countdown", "arguments": {"n": 100}}, id="busy"))
    wait_for(lambda: _running(tenant) == 1, message="the long call to hold the tenant's concurrency slot")

    refused = other.request("tools/call", {"name": "echo", "arguments": {"text": "x"}})
    assert "Too many calls at once" in refused["error"]["message"]

    cancel = note("notifications/cancelled", {"requestId": "busy"})
    assert http.post(other_server.endpoint("live-busy"), json=cancel, headers=busy.headers()).status_code == 202
    assert "result" not in pending.response().text  # cancelled: no response
    wait_for(lambda: _running(tenant) == 0, message="the cancelled call to release its slot")
    assert "result" in other.request("tools/call", {"name": "echo", "arguments": {"text": "x"}})
