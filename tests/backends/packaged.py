"""A live runner of packaged MCP servers (``manage.py run_packaged``) for tests, what tests read
of its instances (their status in Redis), and the live world the end-to-end tests share (the
``world`` fixture of tests/backends/conftest.py): two Toolbay servers, a runner, two tenants
with ``mcp-server-time`` and ``@modelcontextprotocol/server-everything`` added."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import redis
from django.conf import settings
from django.core.management import call_command
from django.test import override_settings
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client

from tenants.services import api_key_create, tenant_create
from tests.mcp.live import ROOT, LiveServer, database_url, start_server, stop_together
from tests.poll import wait_for
from tools_app.backends.packaged import locator
from tools_app.backends.packaged.sandbox import sandbox_status
from tools_app.backends.upstream.federation import upstream_refresh
from tools_app.backends.upstream.models import UpstreamServer
from tools_app.catalog.models import AccessRule
from tools_app.catalog.services import access_rule_grant_pattern

# Installed packages are kept between test runs (var/ is not in git): a re-run installs nothing.
PACKAGE_CACHE = ROOT / "var" / "packages"
TIME_PACKAGE = ("mcp-server-time", "2026.10.19")
EVERYTHING_PACKAGE = ("@modelcontextprotocol/server-everything", "2026.8.31")


def runner_env() -> dict[str, str]:
    env = {"TOOLBAY_PACKAGE_CACHE": str(PACKAGE_CACHE), "TOOLBAY_PACKAGED_START_SECONDS": "60"}
    if not sandbox_status().available:
        # No sandbox on this machine: the tests run the packages unconfined, as an operator who
        # opted out would (the sandbox's own tests cover confinement).
        env["TOOLBAY_SANDBOX_OPTOUT"] = "1"
    return env


@dataclass
class LiveRunner:
    process: subprocess.Popen[bytes]
    log_path: Path

    def stop(self) -> None:
        stop_together([self.process], grace=10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def start_runner(tmp_dir: Path, name: str = "runner", extra_env: dict[str, str] | None = None) -> LiveRunner:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "mcp_platform.settings",
        "DATABASE_URL": database_url(),
        "REDIS_URL": settings.REDIS_URL,
        **runner_env(),
        **(extra_env or {}),
    }
    log_path = tmp_dir / f"{name}.log"
    process = subprocess.Popen(
        [sys.executable, "manage.py", "run_packaged", "--host", "127.0.0.1", "--port", "0"],
        cwd=ROOT,
        env=env,
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
    )
    runner = LiveRunner(process, log_path)

    def serving() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"the runner exited:\n{runner.log()}")
        return "running packaged MCP servers at" in runner.log()

    wait_for(serving, timeout=30, message=lambda: f"the runner to serve; its log:\n{runner.log()}")
    return runner


def instance_status(upstream_id: int, tenant_id: int, user: str | None = None) -> dict[str, Any] | None:
    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        raw = client.get(locator.status_key(locator.scope_of(upstream_id, tenant_id, user)))
    finally:
        client.close()
    return json.loads(raw) if raw else None


def running_pid(upstream_id: int, tenant_id: int) -> int | None:
    status = instance_status(upstream_id, tenant_id)
    return int(status["pid"]) if status and status.get("state") == "running" else None


def _processes() -> dict[int, tuple[int, str, str]]:
    """Every process on this machine: pid -> (parent pid, state, start time), from /proc."""
    found: dict[int, tuple[int, str, str]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError):
                with open(f"/proc/{entry}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
                found[int(entry)] = (int(fields[1]), fields[0], fields[19])
    return found


def kill_instance(pid: int, timeout: float = 10) -> None:
    """SIGKILL an instance's process (``pid``, as its status says) and wait until every process
    of it is dead - not for the runner to notice (its status may still say running).

    In the sandbox ``pid`` is bubblewrap's, and it dies at once; the server inside dies only
    when the kernel tears the sandbox's PID namespace down after it (``--die-with-parent``):
    milliseconds later, tens of them on a busy machine. Until then the server still reads its
    stdin and answers, so a call sent "after the kill" could be answered by the killed instance."""
    processes = _processes()
    children: dict[int, list[int]] = {}
    for child, (parent, _, _) in processes.items():
        children.setdefault(parent, []).append(child)
    tree: list[tuple[int, str]] = []
    stack = [pid]
    while stack:  # (pid, start time): a pid reused meanwhile is another process
        member = stack.pop()
        if member in processes:
            tree.append((member, processes[member][2]))
            stack.extend(children.get(member, []))
    os.kill(pid, signal.SIGKILL)

    def dead() -> bool:
        now = _processes()
        return not any(
            (seen := now.get(member)) is not None and seen[2] == started and seen[1] not in ("Z", "X")
            for member, started in tree
        )

    wait_for(dead, timeout=timeout, interval=0.005, message=f"every process of instance {pid} to die")


METRICS_TOKEN = "runner-metrics-7f3a"


@dataclass
class World:
    servers: list[LiveServer]
    runner: LiveRunner
    keys: dict[str, str]
    tenant_ids: dict[str, int]
    upstreams: dict[str, int]
    published: dict[str, str]
    tmp: Path
    slugs: dict[str, str]  # the tests' names of the tenants (pk-alpha, pk-beta) -> their slugs


def add_server(name: str, tenant: str, *source: str) -> tuple[int, str]:
    out = io.StringIO()
    call_command("add_upstream", name, "--tenant", tenant, *source, "--publish-all", "--grant", stdout=out)
    server = UpstreamServer.objects.get(tenant__slug=tenant, name=name)
    return server.pk, out.getvalue()


@contextlib.contextmanager
def live_world(django_db_blocker: Any, tmp: Path, prefix: str = "pk") -> Iterator[World]:
    """``prefix`` makes the tenants' slugs (``<prefix>-alpha``), so that several modules' worlds
    live in one test database; tests still call them pk-alpha and pk-beta."""
    slugs = {"pk-alpha": f"{prefix}-alpha", "pk-beta": f"{prefix}-beta"}
    # The two Toolbay servers boot while the runner starts and the servers are added (each takes
    # seconds of imports on a busy machine; one after the other they would add up).
    booting = ThreadPoolExecutor(max_workers=2)
    pending = [booting.submit(start_server, tmp, name) for name in ("toolbay-a", "toolbay-b")]
    keys: dict[str, str] = {}
    tenant_ids: dict[str, int] = {}
    upstreams: dict[str, int] = {}
    published: dict[str, str] = {}
    runner: LiveRunner | None = None
    try:
        runner = start_runner(tmp, extra_env={"METRICS_TOKEN": METRICS_TOKEN})
        with django_db_blocker.unblock(), override_settings(TOOLBAY_PACKAGE_CACHE=str(PACKAGE_CACHE)):
            for slug in ("pk-alpha", "pk-beta"):
                tenant = tenant_create(slug=slugs[slug], name=slugs[slug])
                tenant_ids[slug] = tenant.pk
                _, keys[slug] = api_key_create(tenant=tenant, name=f"{slug} key")
            upstreams["time"], published["time"] = add_server(
                "time", slugs["pk-alpha"], "--pypi", "==".join(TIME_PACKAGE), "--prefix", "time."
            )
            for slug in ("pk-alpha", "pk-beta"):
                upstreams[f"everything@{slug}"], published[f"everything@{slug}"] = add_server(
                    "everything", slugs[slug], "--npm", "@".join(EVERYTHING_PACKAGE), "--prefix", "ev."
                )
            # alpha's everything server also mirrors its resources and prompts.
            mirrored = UpstreamServer.objects.get(pk=upstreams["everything@pk-alpha"])
            mirrored.import_resources_and_prompts = True
            mirrored.save()
            upstream_refresh(upstream_id=mirrored.pk)
            access_rule_grant_pattern(tenant=mirrored.tenant, pattern="tag:mcp:everything", kind=AccessRule.Kind.ANY)
        servers = [future.result() for future in pending]
    except BaseException:
        for future in pending:
            if future.exception() is None:
                future.result().stop()
        if runner is not None:
            runner.stop()
        raise
    finally:
        booting.shutdown()
    yield World(servers, runner, keys, tenant_ids, upstreams, published, tmp, slugs)
    stop_together([server.process for server in servers], grace=10)
    runner.stop()


def sdk_client(
    world: World,
    tenant: str,
    server: int = 0,
    transport: httpx2.AsyncBaseTransport | None = None,
    key: str | None = None,
    **callbacks: Any,
) -> Client:
    """The official SDK client (legacy mode) of ``tenant`` (with its first key, or ``key``) on
    Toolbay server ``server`` (``transport``: how its requests travel)."""
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {key or world.keys[tenant]}"}, timeout=60, transport=transport
    )
    endpoint = world.servers[server].endpoint(world.slugs[tenant])
    return Client(streamable_http_client(endpoint, http_client=http), mode="legacy", **callbacks)


async def all_tools(client: Client) -> set[str]:
    names: set[str] = set()
    cursor = None
    while True:
        page = await client.list_tools(cursor=cursor)
        names.update(tool.name for tool in page.tools)
        cursor = page.next_cursor
        if cursor is None:
            return names


class AnswersToTheOther(httpx2.AsyncBaseTransport):
    """Requests go to Toolbay server ``home``; the client's answers (to elicitation, sampling)
    and notifications (cancellations) go to ``other``: what reaches a call crosses processes,
    as it does behind a load balancer. ``crossed`` counts what went to ``other``."""

    def __init__(self, home: int, other: int) -> None:
        self.home, self.other = home, other
        self.crossed: list[str] = []
        self._inner = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        port = self.home
        if request.method == "POST":
            message = json.loads(request.content or b"{}")
            method = message.get("method") if isinstance(message, dict) else None
            if method is None or str(method).startswith("notifications/"):
                port = self.other
                self.crossed.append(str(method or "response"))
        request.url = request.url.copy_with(port=port)
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


def runner_metrics(world: World, upstream: int, tenant: int) -> dict[str, float]:
    """The runner's per-instance metrics of one scope, by name (``toolbay_packaged_instance_`` left out)."""
    status = instance_status(upstream, tenant)
    assert status is not None and "url" in status, status
    url = status["url"].split("/i/")[0] + "/metrics"
    text = httpx2.get(url, headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, timeout=10).text
    labels = f'{{scope="{upstream}:{tenant}",upstream="{upstream}",tenant="{tenant}"}}'
    prefix = "toolbay_packaged_instance_"
    return {
        line[len(prefix) : line.index("{")]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(prefix) and labels in line
    }
