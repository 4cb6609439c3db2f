"""The console's pending approvals in a real browser: two calls of a tool whose policy is
``operator`` wait while an operator, signed in to the console in headless Chromium, sees
them appear live (no reload), approves one and denies the other; the MCP client (the
official SDK) receives the result of the first and the refusal of the second, and the
backend ran exactly once.
"""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import redis
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult

from tenants.models import Tenant
from tenants.services import api_key_create, membership_set, tenant_create
from tests.audit.browser import CHROMIUM, CHROMIUM_ARGS, sync_playwright_or_skip
from tests.mcp.live import start_server
from tools_app.catalog.models import Tool
from tools_app.catalog.services import access_rule_grant_pattern
from tools_app.runs.models import Approval

pytestmark = pytest.mark.live

PASSWORD = "approvals-live-pw"
SLUG, OPERATOR = "approvals-live", "approvals-live-op"


@pytest.fixture(scope="module")
def site(django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    with django_db_blocker.unblock():
        tenant = tenant_create(slug=SLUG, name="Approvals Live")
        _, raw_key = api_key_create(tenant=tenant, name="agent")
        user = get_user_model().objects.create_user(OPERATOR)
        # The server hashes with Django's default hashers, not the tests' fast MD5 one.
        user.password = PBKDF2PasswordHasher().encode(PASSWORD, "approvalsalt", iterations=1000)
        user.save(update_fields=["password"])
        membership_set(tenant=tenant, user=user, role="operator")
        tool = Tool(
            tenant=tenant,
            name="pay_invoice",
            title="Pay an invoice",
            description="Pays the invoice from the company account.",
            input_schema={
                "type": "object",
                "properties": {"key": {"type": "string"}, "iban_pin": {"type": "string", "x-sensitive": True}},
                "required": ["key"],
            },
            backend_config={"handler": "testing.record_run"},
            tags=["approvals"],
            confirmation="operator",
            timeout_seconds=60,
        )
        tool.full_clean()
        tool.save()
        access_rule_grant_pattern(tenant=tenant, pattern="tag:approvals")
    tmp = tmp_path_factory.mktemp("approvals")
    server = start_server(tmp, "approvals")
    try:
        yield {"server": server, "key": raw_key, "tmp": tmp}
    finally:
        server.stop()
        with django_db_blocker.unblock():
            Tenant.objects.filter(slug=SLUG).delete()
            get_user_model().objects.filter(username=OPERATOR).delete()


class _Calls:
    """Two calls made by the official SDK client in a thread of their own; they wait for the operator."""

    def __init__(self, endpoint: str, api_key: str, keys: list[str]) -> None:
        self.results: dict[str, CallToolResult] = {}
        self._thread = threading.Thread(target=asyncio.run, args=(self._run(endpoint, api_key, keys),), daemon=True)
        self._thread.start()

    async def _run(self, endpoint: str, api_key: str, keys: list[str]) -> None:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {api_key}"}, timeout=90)
        async with http, Client(streamable_http_client(endpoint, http_client=http), mode="legacy") as client:

            async def call(key: str) -> None:
                self.results[key] = await client.call_tool("pay_invoice", {"key": key, "iban_pin": "4711"})

            await asyncio.gather(*(call(key) for key in keys))

    def join(self) -> dict[str, CallToolResult]:
        self._thread.join(60)
        return self.results


def test_an_operator_approves_one_call_and_denies_another(site: dict, django_db_blocker: Any) -> None:
    sync_playwright = sync_playwright_or_skip()
    server = site["server"]
    shots = Path(os.environ.get("TOOLBAY_SCREENSHOT_DIR", site["tmp"]))
    shots.mkdir(parents=True, exist_ok=True)
    approve, deny = f"approve-{uuid.uuid4().hex[:8]}", f"deny-{uuid.uuid4().hex[:8]}"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1360, "height": 900})
            page.set_default_timeout(15_000)
            page.goto(f"{server.url}/console/approvals/")
            page.fill("#id_username", OPERATOR)
            page.fill("#id_password", PASSWORD)
            page.click("button[type=submit]")
            page.wait_for_url(f"{server.url}/console/approvals/")  # back where the login began
            assert page.locator("#pending tr.none").count() == 1

            # The calls start after the page loaded: the list picks them up by itself.
            calls = _Calls(server.endpoint(SLUG), site["key"], [approve, deny])
            rows = page.locator("#pending tr.approval")
            rows.nth(1).wait_for()
            listed = page.locator("#pending").inner_text()
            assert "Pay an invoice" in listed and "Pays the invoice" in listed and "agent" in listed
            assert "[redacted]" in listed and "4711" not in listed
            page.screenshot(path=str(shots / "console-approvals.png"), full_page=True)

            page.locator("#pending tr.approval", has_text=approve).locator("button.approve").click()
            page.wait_for_url("**notice=Approved**")
            page.locator("#pending tr.approval", has_text=deny).locator("button.deny").click()
            page.wait_for_url("**notice=Denied**")
            assert page.locator("#pending tr.none").count() == 1
            assert page.locator("#decided").inner_text().count(OPERATOR) == 2
        finally:
            browser.close()
    results = calls.join()
    assert results[approve].is_error is False and results[approve].content[0].text == f"ran {approve}"
    assert results[deny].is_error is True and "operator declined" in results[deny].content[0].text
    runs = redis.Redis.from_url(settings.REDIS_URL)
    assert (runs.llen(f"test:runs:{approve}"), runs.llen(f"test:runs:{deny}")) == (1, 0)
    with django_db_blocker.unblock():
        decided = dict(Approval.objects.filter(tenant__slug=SLUG).values_list("arguments__key", "status"))
    assert decided == {approve: "approved", deny: "denied"}
