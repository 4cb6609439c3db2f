"""A packaged server that allocates or forks without bound is stopped by its limits
(TOOLBAY_PACKAGED_MEMORY_BYTES, TOOLBAY_PACKAGED_MAX_PROCESSES): the SDK client's call through
Toolbay ends with ``isError`` within seconds, the host goes on, and the next call starts a fresh
instance. The server is a platform admin's ``command``: a small stdio MCP server run by the
system python3 in the sandbox (its code is below; it answers as any stdio server does)."""

from __future__ import annotations

import asyncio
import io
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx2
import pytest
from django.core.management import call_command
from django.test import override_settings
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client

from tenants.services import api_key_create, tenant_create
from tests.backends.packaged import PACKAGE_CACHE, LiveRunner, instance_status, running_pid, start_runner
from tests.mcp.live import LiveServer, start_server, stop_together
from tests.poll import wait_for
from tools_app.backends.upstream.models import UpstreamServer

pytestmark = [
    pytest.mark.live,
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]

MB = 2**20

# A stdio MCP server with three tools: "pid" (which process answers), "hog" (allocates 16 MiB
# at a time without bound) and "bomb" (forks without bound; every child does too).
SERVER = r"""
import json, os, sys
TOOLS = [{"name": n, "description": n, "inputSchema": {"type": "object"},
          "annotations": {"readOnlyHint": True, "openWorldHint": False}} for n in ("pid", "hog", "bomb")]
def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()
for line in sys.stdin:
    request = json.loads(line)
    method, rid = request.get("method"), request.get("id")
    if rid is None:
        continue
    if method == "initialize":
        result = {"protocolVersion": request["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "limits", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        name = request["params"]["name"]
        if name == "hog":
            hoard = []
            while True:
                hoard.append(bytearray(16 * 2**20))
        if name == "bomb":
            while True:
                os.fork()
        result = {"content": [{"type": "text", "text": str(os.getpid())}]}
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": method}})
        continue
    send({"jsonrpc": "2.0", "id": rid, "result": result})
"""


TOOLS = ("hog", "bomb")


@dataclass
class Tenancy:
    slug: str
    key: str
    tenant_id: int
    upstream_id: int


@dataclass
class World:
    server: LiveServer
    runner: LiveRunner
    # One tenant, so one instance, per limit tool: each crash doubles the wait before its
    # instance's next restart (1 s, 2 s, 4 s, ...), so one test's crashes must not delay the other's.
    tenancies: dict[str, Tenancy]


@pytest.fixture(scope="module")
def world(django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("packaged-limits")
    runner = start_runner(
        tmp,
        extra_env={
            "TOOLBAY_PACKAGED_MEMORY_BYTES": str(96 * MB),
            "TOOLBAY_PACKAGED_MAX_PROCESSES": "16",
            "TOOLBAY_PACKAGED_CPU_SECONDS": "20",
        },
    )
    try:
        server = start_server(tmp, "toolbay-limits")
    except BaseException:
        runner.stop()
        raise
    tenancies = {}
    try:
        with django_db_blocker.unblock(), override_settings(TOOLBAY_PACKAGE_CACHE=str(PACKAGE_CACHE)):
            for tool in TOOLS:
                slug = f"pk-limits-{tool}"
                tenant = tenant_create(slug=slug, name=slug)
                _, key = api_key_create(tenant=tenant, name="limits key")
                out = io.StringIO()
                call_command(
                    "add_upstream",
                    "limits",
                    "--tenant",
                    slug,
                    "--command",
                    "/usr/bin/python3",
                    "--arg=-Ic",
                    f"--arg={SERVER}",
                    "--prefix",
                    "lim.",
                    "--publish-all",
                    "--grant",
                    stdout=out,
                )
                upstream_id = UpstreamServer.objects.get(tenant=tenant, name="limits").pk
                assert f"published lim.{tool}  {tool}" in out.getvalue()
                tenancies[tool] = Tenancy(slug, key, tenant.pk, upstream_id)
    except BaseException:
        stop_together([server.process], grace=10)
        runner.stop()
        raise
    yield World(server, runner, tenancies)
    stop_together([server.process], grace=10)
    runner.stop()


def _client(world: World, tenancy: Tenancy) -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {tenancy.key}"}, timeout=60)
    return Client(streamable_http_client(world.server.endpoint(tenancy.slug), http_client=http), mode="legacy")


@pytest.mark.parametrize(
    ("tool", "cause"), [("hog", "MemoryError"), ("bomb", "Resource temporarily unavailable")], ids=["memory", "fork"]
)
def test_a_server_beyond_its_limits_ends_its_call_with_is_error_and_the_next_call_starts_afresh(
    world: World, tool: str, cause: str
) -> None:
    tenancy = world.tenancies[tool]

    async def scenario() -> None:
        async with _client(world, tenancy) as client:
            first = await client.call_tool("lim.pid", {})
            assert first.is_error is False, first.content
            pid = running_pid(tenancy.upstream_id, tenancy.tenant_id)
            assert pid is not None
            started = time.monotonic()
            result = await asyncio.wait_for(client.call_tool(f"lim.{tool}", {}), 30)
            assert result.is_error is True
            assert "ended during the call" in result.content[0].text, result.content[0].text
            assert time.monotonic() - started < 15
            # The host is unaffected: this process still forks and allocates.
            child = os.fork()
            if child == 0:
                os._exit(0)
            assert os.waitpid(child, 0)[1] == 0
            assert len(bytearray(64 * MB)) == 64 * MB

            def answers_again() -> bool:
                again = asyncio.run_coroutine_threadsafe(client.call_tool("lim.pid", {}), loop).result(30)
                return again.is_error is False

            loop = asyncio.get_running_loop()
            await asyncio.to_thread(wait_for, answers_again, timeout=30, message="a call after the restart")
            fresh = running_pid(tenancy.upstream_id, tenancy.tenant_id)
            assert fresh is not None and fresh != pid
            status = instance_status(tenancy.upstream_id, tenancy.tenant_id)
            assert status is not None and status["restarts"] >= 1
            assert cause in status["last_error"], status["last_error"]

    asyncio.run(scenario())
