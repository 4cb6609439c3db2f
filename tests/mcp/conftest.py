"""Live MCP servers: real uvicorn processes on loopback, sharing the test database and Redis.

Data for them is committed (they are other processes), under tenant slugs no other test
uses. Two processes run so tests can prove that nothing lives in one process's memory.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone

from conformance.seed import seed_conformance
from tenants.services import api_key_create, api_key_revoke, tenant_create
from tests.mcp.live import (
    LiveServer,
    LiveWorker,
    LiveWriter,
    kill_workers,
    start_audit_writer,
    start_server,
    start_together,
    start_worker,
    stop_together,
)
from tools_app.catalog.models import Tool
from tools_app.catalog.services import access_rule_grant_pattern, catalog_entry_create

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
        seed_conformance()
        alpha = tenant_create(slug="live-alpha", name="Live Alpha")
        beta = tenant_create(slug="live-beta", name="Live Beta")
        tenant_create(slug="live-public", name="Live Public", allow_anonymous=True)
        tenant_create(slug="live-inactive", name="Live Inactive", is_active=False)
        for tenant in (alpha, beta):
            access_rule_grant_pattern(tenant=tenant, pattern="tag:demo")
        access_rule_grant_pattern(tenant=alpha, pattern="tag:conformance")
        for name, fields in BACKGROUND_TOOLS.items():
            # Test tools change nothing: no confirmation (tests/mcp/test_confirmation.py asks).
            fields = {
                "name": name,
                "description": f"test tool {name}",
                "tags": ["bg"],
                "confirmation": "none",
                **fields,
            }
            catalog_entry_create(model=Tool, tenant=None, fields=fields)
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
                # Time passing, not an edit (the services refuse an expiry in the past).
                key.expires_at = timezone.now() - timedelta(seconds=1)
                key.save()
    return world


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
    servers = start_together(lambda: start_server(tmp, "server-a"), lambda: start_server(tmp, "server-b"))
    yield servers
    stop_together([server.process for server in servers], grace=10)


@pytest.fixture(scope="session")
def live_workers(live_world: LiveWorld, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[LiveWorker]]:
    tmp = tmp_path_factory.mktemp("workers")
    # worker-a serves short calls only, worker-b both: long calls cannot starve short ones.
    workers = start_together(
        lambda: start_worker(tmp, "worker-a", "toolbay.short"),
        lambda: start_worker(tmp, "worker-b", "toolbay.short,toolbay.long"),
    )
    yield workers
    kill_workers(workers)


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
