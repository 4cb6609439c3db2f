"""Live MCP servers: real uvicorn processes on loopback, sharing the test database and Redis.

Data for them is committed (they are other processes), under tenant slugs no other test
uses. Two processes run so tests can prove that nothing lives in one process's memory.
"""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from tenants.services import api_key_create, api_key_revoke, tenant_create
from tools_app.services import access_rule_grant_pattern

ROOT = Path(__file__).resolve().parents[2]
ACCEPT_BOTH = "application/json, text/event-stream"
LIVE_PAGE_SIZE = 3


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _database_url() -> str:
    db = connection.settings_dict
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    return f"postgres://{db['USER']}{password}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


@dataclass
class LiveServer:
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def endpoint(self, tenant: str) -> str:
        return f"{self.url}/mcp/{tenant}"

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()


def start_server(tmp_dir: Path, name: str, extra_env: dict[str, str] | None = None) -> LiveServer:
    port = _free_port()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "mcp_platform.settings",
        "DATABASE_URL": _database_url(),
        "REDIS_URL": settings.REDIS_URL,
        "CHANNEL_LAYER_PREFIX": os.environ["CHANNEL_LAYER_PREFIX"],
        "MCP_PAGE_SIZE": str(LIVE_PAGE_SIZE),
        "MCP_CLIENT_REQUEST_TIMEOUT_SECONDS": "10",
        "MCP_CANCEL_GRACE_SECONDS": "0.5",
        "MCP_SSE_KEEPALIVE_SECONDS": "1",
        "MCP_MAX_BODY_BYTES": "65536",
        **(extra_env or {}),
    }
    log_path = tmp_dir / f"{name}.log"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "mcp_platform.asgi:application",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
            "--no-access-log",
        ],
        cwd=ROOT,
        env=env,
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
    )
    server = LiveServer(f"http://127.0.0.1:{port}", process, log_path)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server {name} exited:\n{log_path.read_text()}")
        try:
            if httpx.get(f"{server.url}/healthz", timeout=1).status_code == 200:
                return server
        except httpx.TransportError:
            time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"server {name} did not start:\n{log_path.read_text()}")


@dataclass
class LiveWorld:
    """Committed tenants and keys the live servers serve."""

    keys: dict[str, str] = field(default_factory=dict)
    key_ids: dict[str, int] = field(default_factory=dict)


@pytest.fixture(scope="session")
def live_world(django_db_setup: Any, django_db_blocker: Any) -> LiveWorld:
    world = LiveWorld()
    with django_db_blocker.unblock():
        call_command("seed_demo", stdout=io.StringIO())
        alpha = tenant_create(slug="live-alpha", name="Live Alpha")
        beta = tenant_create(slug="live-beta", name="Live Beta")
        tenant_create(slug="live-public", name="Live Public", allow_anonymous=True)
        gone = tenant_create(slug="live-inactive", name="Live Inactive")
        gone.is_active = False
        gone.save()
        for tenant in (alpha, beta):
            access_rule_grant_pattern(tenant=tenant, pattern="tag:demo")
        access_rule_grant_pattern(tenant=alpha, pattern="tag:conformance")
        for label, tenant in (
            ("alpha", alpha),
            ("alpha2", alpha),
            ("beta", beta),
            ("revoked", alpha),
            ("expired", alpha),
        ):
            key, raw = api_key_create(tenant=tenant, name=f"live {label}")
            world.keys[label] = raw
            world.key_ids[label] = key.pk
            if label == "revoked":
                api_key_revoke(key=key)
            if label == "expired":
                key.expires_at = timezone.now() - timedelta(seconds=1)
                key.save()
    return world


@pytest.fixture(scope="session")
def live_servers(live_world: LiveWorld, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[LiveServer]]:
    tmp = tmp_path_factory.mktemp("servers")
    servers = [start_server(tmp, "server-a"), start_server(tmp, "server-b")]
    yield servers
    for server in servers:
        server.stop()


@pytest.fixture
def server(live_servers: list[LiveServer]) -> LiveServer:
    return live_servers[0]


@pytest.fixture
def other_server(live_servers: list[LiveServer]) -> LiveServer:
    return live_servers[1]
