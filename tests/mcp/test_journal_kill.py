"""Audit rows survive SIGKILL on both sides of the journal: every call a client got an answer
to is recorded, and no call is recorded twice.

Two uvicorn processes answer calls under load from several clients; mid-load one audit
writer is SIGKILLed (with a batch possibly taken but not acknowledged) and so is one of the
servers (with calls possibly in flight). Then the journal drains through the writer that
is left, and the rows are counted per call.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections import Counter
from typing import Any

import httpx
import pytest

from audit.models import Invocation
from tenants.models import Tenant
from tenants.services import api_key_create, tenant_create
from tests.mcp.live import LiveServer, journal_drained, start_audit_writer, start_server
from tests.mcp.wire import INIT_PARAMS, headers, note, rpc
from tests.poll import wait_for, wait_for_async
from tools_app.catalog.services import access_rule_grant_pattern

pytestmark = pytest.mark.live

SLUG = "live-journal"
CLIENTS_PER_SERVER = 4


@pytest.fixture
def world(django_db_setup: Any, django_db_blocker: Any, live_world: Any, live_audit_writer: Any) -> Any:
    with django_db_blocker.unblock():
        tenant = tenant_create(slug=SLUG, name="Journal under fire")
        access_rule_grant_pattern(tenant=tenant, pattern="tag:demo")
        _, raw = api_key_create(tenant=tenant, name="kill test")
    yield tenant, raw
    with django_db_blocker.unblock():
        wait_for(journal_drained, timeout=30, message="the audit writer to write every journaled row")
        Tenant.objects.filter(slug=SLUG).delete()


async def _client(server: LiveServer, key: str, label: str, stop: asyncio.Event, answered: list[str]) -> None:
    """Calls echo back to back with a unique text each; keeps the texts that were answered."""
    async with httpx.AsyncClient(timeout=10) as http:
        try:
            init = await http.post(server.endpoint(SLUG), json=rpc("initialize", INIT_PARAMS), headers=headers(key))
            session = init.headers["mcp-session-id"]
            call_headers = headers(key, session, **{"MCP-Protocol-Version": "2025-11-25"})
            await http.post(server.endpoint(SLUG), json=note("notifications/initialized"), headers=call_headers)
            n = 0
            while not stop.is_set():
                n += 1
                text = f"{label}-{n}"
                body = rpc("tools/call", {"name": "echo", "arguments": {"text": text}}, id=n)
                response = await http.post(server.endpoint(SLUG), json=body, headers=call_headers)
                if response.status_code == 200 and response.json()["result"]["content"][0]["text"] == text:
                    answered.append(text)
        except (httpx.HTTPError, KeyError, ValueError):
            return  # the server was killed under this client: its unanswered call may or may not be recorded


async def _answered(answered: list[str], count: int) -> None:
    await wait_for_async(
        lambda: len(answered) >= count, timeout=30, message=lambda: f"{count} answered calls ({len(answered)})"
    )


def test_sigkill_of_a_server_and_a_writer_loses_and_doubles_no_row(world, tmp_path, django_db_blocker):
    tenant, key = world
    servers = [start_server(tmp_path, "journal-a"), start_server(tmp_path, "journal-b")]
    doomed_writer = start_audit_writer(tmp_path, "doomed-writer")
    answered: list[str] = []
    try:

        async def load() -> None:
            stop = asyncio.Event()
            clients = [
                _client(server, key, f"{server.url.rsplit(':', 1)[1]}-{i}", stop, answered)
                for server in servers
                for i in range(CLIENTS_PER_SERVER)
            ]
            load_task = asyncio.gather(*clients)
            # The kills follow the load's progress, not the clock (on a busy machine a fixed
            # moment can come before any call was answered, when the writer holds nothing).
            await _answered(answered, 70)
            os.kill(doomed_writer.process.pid, signal.SIGKILL)
            await _answered(answered, 140)
            os.kill(servers[0].process.pid, signal.SIGKILL)
            await _answered(answered, 210)  # server B carries the load on
            stop.set()
            await load_task

        asyncio.run(load())
    finally:
        for server in servers:
            server.stop()
        doomed_writer.stop()

    # The session's audit writer takes over what the killed one held, and writes the rest.
    wait_for(journal_drained, timeout=30, interval=0.2, message="the audit journal to be drained")

    with django_db_blocker.unblock():
        texts = Counter(
            arguments.get("text")
            for arguments in Invocation.objects.filter(tenant=tenant).values_list("arguments", flat=True)
        )
    missing = [text for text in answered if texts[text] == 0]
    doubled = [text for text, count in texts.items() if count > 1]
    assert missing == [], f"{len(missing)} answered calls have no invocation row"
    assert doubled == [], f"{len(doubled)} calls were recorded twice"
