"""Tenant call limits hold across server processes."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from audit.models import Invocation
from tenants.services import api_key_create, tenant_create
from tests.mcp.wire import McpSession
from tools_app.catalog.services import access_rule_grant_pattern

pytestmark = pytest.mark.live


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=30) as client:
        yield client


def _tenant(slug: str, **limits: int) -> str:
    tenant = tenant_create(slug=slug, name=slug)
    for name, value in limits.items():
        setattr(tenant, name, value)
    tenant.save()
    access_rule_grant_pattern(tenant=tenant, pattern="tag:demo")
    return api_key_create(tenant=tenant, name="limited")[1]


def test_calls_per_minute_across_processes(orm, http, server, other_server, live_world):
    key = _tenant("live-rate", calls_per_minute=3)
    first = McpSession.open(http, server.endpoint("live-rate"), key)
    second = McpSession.open(http, other_server.endpoint("live-rate"), key)
    if int(time.time()) % 60 > 55:
        time.sleep(6)  # stay inside one minute window
    answers = [s.request("tools/call", {"name": "echo", "arguments": {"text": "x"}}) for s in (first, second, first)]
    assert all("result" in a for a in answers)
    refused = second.request("tools/call", {"name": "echo", "arguments": {"text": "x"}})
    assert refused["error"]["code"] == -32000
    assert "3 calls per minute" in refused["error"]["message"]
    time.sleep(1)
    assert Invocation.objects.filter(tenant__slug="live-rate", outcome="denied").count() == 1
    assert first.request("ping")["result"] == {}  # other methods are not limited


def test_max_concurrent_calls(orm, http, server, other_server, live_world):
    key = _tenant("live-busy", max_concurrent_calls=1)
    busy = McpSession.open(http, server.endpoint("live-busy"), key)
    other = McpSession.open(http, other_server.endpoint("live-busy"), key)
    thread = threading.Thread(target=lambda: busy.request("tools/call", {"name": "countdown", "arguments": {"n": 5}}))
    thread.start()
    time.sleep(0.4)
    refused = other.request("tools/call", {"name": "echo", "arguments": {"text": "x"}})
    assert "Too many calls at once" in refused["error"]["message"]
    thread.join()
    assert "result" in other.request("tools/call", {"name": "echo", "arguments": {"text": "x"}})
