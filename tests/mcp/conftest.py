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
from tests.poll import wait_for
from tools_app.catalog.models import Tool
from tools_app.catalog.services import access_rule_grant_pattern

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


def stop_together(processes: list[subprocess.Popen[bytes]], grace: float) -> None:
    """Ask every process to shut down at once, then wait for each (killed after ``grace``
    seconds): their shutdowns overlap instead of adding up."""
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@dataclass
class LiveServer:
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def endpoint(self, tenant: str) -> str:
        return f"{self.url}/mcp/{tenant}"

    def stop(self) -> None:
        stop_together([self.process], grace=10)


def start_server(
    tmp_dir: Path, name: str, extra_env: dict[str, str] | None = None, port: int | None = None
) -> LiveServer:
    """``port``: serve on that port (a restarted server takes its predecessor's place)."""
    port = port or _free_port()
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
            # As production launches it: X-Forwarded-* from no one unless configured.
            "--forwarded-allow-ips",
            os.environ.get("TOOLBAY_TRUSTED_PROXIES", ""),
        ],
        cwd=ROOT,
        env=env,
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
    )
    server = LiveServer(f"http://127.0.0.1:{port}", process, log_path)

    def healthy() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"server {name} exited:\n{log_path.read_text()}")
        return httpx.get(f"{server.url}/healthz", timeout=1).status_code == 200

    try:
        wait_for(
            healthy,
            timeout=30,
            ignore=(httpx.TransportError,),
            message=lambda: f"server {name} to answer /healthz; its log:\n{log_path.read_text()}",
        )
    except BaseException:
        server.stop()
        raise
    return server


_COUNT_SCHEMA = {"type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]}
_ANY_SCHEMA = {"type": "object"}
BACKGROUND_TOOLS: dict[str, dict[str, Any]] = {
    "bg_count_once": {  # like demo slow_count, but not idempotent: never run twice
        "input_schema": _COUNT_SCHEMA,
        "backend_config": {"handler": "demo.slow_count"},
        "execution_mode": "background",
        "task_support": "optional",
        "idempotent_hint": False,
        "timeout_seconds": 60,
    },
    "bg_elicit": {
        "input_schema": {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]},
        "backend_config": {"handler": "conformance.elicitation"},
        "execution_mode": "background",
        "task_support": "optional",
    },
    "bg_stubborn": {
        "input_schema": _ANY_SCHEMA,
        "backend_config": {"handler": "testing.stubborn"},
        "execution_mode": "background",
        "timeout_seconds": 20,
    },
    "bg_stubborn_timeout": {  # blocking code past its timeout: told, then its process is killed
        "input_schema": _ANY_SCHEMA,
        "backend_config": {"handler": "testing.stubborn"},
        "execution_mode": "background",
        "timeout_seconds": 1,
    },
    "bg_timeout": {
        "input_schema": _COUNT_SCHEMA,
        "backend_config": {"handler": "demo.slow_count"},
        "execution_mode": "background",
        "timeout_seconds": 0.5,
    },
    "bg_flaky": {
        "input_schema": _ANY_SCHEMA,
        "backend_config": {"handler": "testing.flaky"},
        "execution_mode": "background",
        "idempotent_hint": True,
    },
    "inline_flaky": {
        "input_schema": _ANY_SCHEMA,
        "backend_config": {"handler": "testing.flaky"},
        "idempotent_hint": True,
    },
    "inline_flaky_once": {"input_schema": _ANY_SCHEMA, "backend_config": {"handler": "testing.flaky"}},
    "bg_echo": {
        "input_schema": _ANY_SCHEMA,
        "backend_config": {"handler": "demo.echo"},
        "execution_mode": "background",
    },
    "inline_timeout": {
        "input_schema": {"type": "object", "properties": {"n": {"type": "integer"}}},
        "backend_config": {"handler": "demo.countdown"},
        "timeout_seconds": 0.3,
    },
    "inline_crash": {"input_schema": _ANY_SCHEMA, "backend_config": {"handler": "testing.crash"}},
    "bg_loop_blocker": {  # blocks the worker's event loop past its timeout: the web side ends it
        "input_schema": _ANY_SCHEMA,
        "backend_config": {"handler": "testing.loop_blocker"},
        "execution_mode": "background",
        "timeout_seconds": 1,
    },
    "secret_echo": {
        "input_schema": {
            "type": "object",
            "properties": {
                "text": {"type": "string"},
                "password": {"type": "string", "x-sensitive": True},
                "profile": {
                    "type": "object",
                    "properties": {"token": {"type": "string", "writeOnly": True}, "city": {"type": "string"}},
                },
            },
            "required": ["text"],
        },
        "backend_config": {"handler": "demo.echo"},
    },
    "task_only_echo": {
        "input_schema": _ANY_SCHEMA,
        "backend_config": {"handler": "demo.echo"},
        "task_support": "required",
    },
}


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
        for name, fields in BACKGROUND_TOOLS.items():
            # Test tools change nothing: no confirmation (tests/mcp/test_confirmation.py asks).
            fields = {"confirmation": "none", **fields}
            tool = Tool(name=name, description=f"test tool {name}", tags=["bg"], **fields)
            tool.full_clean()
            tool.save()
        access_rule_grant_pattern(tenant=alpha, pattern="tag:bg")
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


@dataclass
class LiveWriter:
    """An ``audit_writer`` process: moves invocation rows from the Redis journal to the database."""

    process: subprocess.Popen[bytes]
    log_path: Path

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()


def start_audit_writer(tmp_dir: Path, name: str = "audit-writer") -> LiveWriter:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "mcp_platform.settings",
        "DATABASE_URL": _database_url(),
        "REDIS_URL": settings.REDIS_URL,
        # Rows a killed writer took are taken over quickly.
        "AUDIT_WRITER_CLAIM_IDLE_SECONDS": "1",
    }
    log_path = tmp_dir / f"{name}.log"
    process = subprocess.Popen(
        [sys.executable, "manage.py", "audit_writer"],
        cwd=ROOT,
        env=env,
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
    )
    return LiveWriter(process, log_path)


@pytest.fixture(scope="session")
def live_audit_writer(live_world: LiveWorld, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveWriter]:
    writer = start_audit_writer(tmp_path_factory.mktemp("audit-writer"))
    yield writer
    writer.stop()


@pytest.fixture(scope="session")
def live_servers(
    live_world: LiveWorld, live_audit_writer: LiveWriter, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[LiveServer]]:
    tmp = tmp_path_factory.mktemp("servers")
    servers = [start_server(tmp, "server-a"), start_server(tmp, "server-b")]
    yield servers
    stop_together([server.process for server in servers], grace=10)


@dataclass
class LiveWorker:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def stop(self) -> None:
        stop_together([self.process], grace=15)


def start_worker(tmp_dir: Path, name: str, queues: str, extra_env: dict[str, str] | None = None) -> LiveWorker:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "mcp_platform.settings",
        "DATABASE_URL": _database_url(),
        "REDIS_URL": settings.REDIS_URL,
        "MCP_CANCEL_GRACE_SECONDS": "0.5",
        "MCP_CLIENT_REQUEST_TIMEOUT_SECONDS": "10",
        "TOOLBAY_RETRY_BACKOFF_SECONDS": "0.05",
        **(extra_env or {}),
    }
    log_path = tmp_dir / f"{name}.log"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "mcp_platform",
            "worker",
            "-Q",
            queues,
            "-c",
            "1",
            "-P",
            "prefork",
            "-n",
            f"{name}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-l",
            "INFO",
        ],
        cwd=ROOT,
        env=env,
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
    )
    worker = LiveWorker(name, process, log_path)

    def ready() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"worker {name} exited:\n{log_path.read_text()}")
        return b"ready." in log_path.read_bytes()

    try:
        wait_for(ready, timeout=60, message=lambda: f"worker {name} to log 'ready.'; its log:\n{log_path.read_text()}")
    except BaseException:
        process.kill()
        raise
    return worker


@pytest.fixture(scope="session")
def live_workers(live_world: LiveWorld, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[LiveWorker]]:
    tmp = tmp_path_factory.mktemp("workers")
    # worker-a serves short calls only, worker-b both: long calls cannot starve short ones.
    workers = [
        start_worker(tmp, "worker-a", "toolbay.short"),
        start_worker(tmp, "worker-b", "toolbay.short,toolbay.long"),
    ]
    yield workers
    stop_together([worker.process for worker in workers], grace=15)


@pytest.fixture
def orm(django_db_blocker: Any) -> Iterator[None]:
    """Read or write the live database from a test (autocommit, visible to the servers)."""
    with django_db_blocker.unblock():
        yield


@pytest.fixture
def server(live_servers: list[LiveServer]) -> LiveServer:
    return live_servers[0]


@pytest.fixture
def other_server(live_servers: list[LiveServer]) -> LiveServer:
    return live_servers[1]
