"""The console and the metrics against a real server: a headless Chromium (Debian's, through
Playwright) logs in as an operator, filters the invocation log, opens a detail and looks at
the charts; a real MCP session feeds /metrics (calls, open streams, list_changed fan-out)
and JSON logs.

The server is a uvicorn process on the test database (tests/mcp/conftest.py start_server),
so the data it shows is committed, under slugs no other test uses, and removed afterwards.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from audit.models import Invocation
from tenants.models import Tenant
from tenants.services import api_key_create, membership_set, tenant_create
from tests.mcp.conftest import LiveServer, start_server
from tests.mcp.wire import McpSession, parse_sse
from tests.poll import wait_for
from tools_app.catalog.models import Tool
from tools_app.catalog.services import access_rule_grant_pattern

pytestmark = pytest.mark.live

CHROMIUM = os.environ.get("TOOLBAY_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PASSWORD = "console-live-pw"
SLUG, OTHER = "console-live", "console-elsewhere"
ERRORS = ["upstream answered 502 Bad Gateway", "quota exceeded for the month", "invalid API token for upstream"]


def _seed(tenant: Tenant, other: Tenant, key_id: int) -> None:
    """A busy hour: 240 calls over 60 minutes, a few per minute not completed."""
    now = timezone.now()
    rows = []
    for i in range(240):
        minute = i // 4
        outcome = "completed"
        if i % 11 == 0:
            outcome = "error"
        elif i % 17 == 0:
            outcome = "timed_out"
        elif i % 23 == 0:
            outcome = "invalid_arguments"
        tool = ("search_docs", "weather", "translate", "summarize")[i % 4]
        started = now - timedelta(minutes=minute, seconds=i % 4 * 10)
        rows.append(
            Invocation(
                tenant=tenant,
                key_id=key_id,
                key_label="production (tb_live…)",
                session_id=f"session-{i // 20}",
                client_name="claude-desktop",
                client_version="1.4",
                tool_name=tool,
                tool_version=2,
                arguments={"query": f"question {i}", "api_token": "[redacted]"},
                outcome=outcome,
                error_message=ERRORS[i % 3]
                if outcome == "error"
                else ("timed out after 30 s" if outcome == "timed_out" else ""),
                duration_ms=float(20 + (i * 37) % 400 + (900 if tool == "summarize" else 0)),
                started_at=started,
                finished_at=started + timedelta(milliseconds=50),
            )
        )
    rows.append(
        Invocation(
            tenant=other,
            tool_name="elsewhere_secret_tool",
            outcome="error",
            error_message="must never show",
            started_at=now - timedelta(minutes=3),
            finished_at=now,
            duration_ms=5.0,
        )
    )
    Invocation.objects.bulk_create(rows)


@pytest.fixture(scope="module")
def site(django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    with django_db_blocker.unblock():
        tenant = tenant_create(slug=SLUG, name="Console Live")
        other = tenant_create(slug=OTHER, name="Console Elsewhere")
        key, raw_key = api_key_create(tenant=tenant, name="production")
        # The server hashes with Django's default hashers, not the tests' fast MD5 one.
        user = get_user_model().objects.create_user("console-live-op")
        user.password = PBKDF2PasswordHasher().encode(PASSWORD, "consolesalt", iterations=1000)
        user.save(update_fields=["password"])
        membership_set(tenant=tenant, user=user, role="operator")
        tool = Tool(
            tenant=tenant,
            name="console_echo",
            description="v1",
            input_schema={"type": "object", "properties": {"text": {"type": "string"}}},
            backend_config={"handler": "demo.echo"},
            tags=["console"],
            confirmation="none",
        )
        tool.full_clean()
        tool.save()
        access_rule_grant_pattern(tenant=tenant, pattern="tag:console")
        _seed(tenant, other, key.pk)
    tmp = tmp_path_factory.mktemp("console")
    server = start_server(tmp, "console", {"LOG_FORMAT": "json", "MCP_SSE_KEEPALIVE_SECONDS": "1"})
    try:
        yield {"server": server, "key": raw_key, "tmp": tmp, "tool": tool}
    finally:
        server.stop()
        with django_db_blocker.unblock():
            Tenant.objects.filter(slug__in=[SLUG, OTHER]).delete()  # their invocations go with them
            get_user_model().objects.filter(username="console-live-op").delete()


def _browser() -> Any:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM}: install Debian's (apt-get install chromium) to run the browser test")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the playwright package is not installed (pip install -r requirements-dev.txt)")
    return sync_playwright


def test_operator_uses_the_console_in_a_browser(site: dict) -> None:
    sync_playwright = _browser()
    server: LiveServer = site["server"]
    shots = Path(os.environ.get("TOOLBAY_SCREENSHOT_DIR", site["tmp"]))
    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1360, "height": 900})
            page.set_default_timeout(10_000)

            # Not signed in: the console sends the browser to its login page, then back.
            page.goto(f"{server.url}/console/invocations/")
            assert "/console/login/" in page.url
            page.fill("#id_username", "console-live-op")
            page.fill("#id_password", PASSWORD)
            page.click("button[type=submit]")
            page.wait_for_url(f"{server.url}/console/invocations/")
            rows = page.locator("#invocations tbody tr")
            assert rows.count() == 50  # one keyset page
            assert "elsewhere_secret_tool" not in page.content()

            # Filter: errors of one tool.
            page.select_option("#id_outcome", "error")
            page.fill("#id_tool", "search_docs")
            page.click("#filters button[type=submit]")
            page.wait_for_url("**outcome=error**")
            assert rows.count() > 0
            assert set(page.locator("#invocations tbody tr td:nth-child(4)").all_inner_texts()) == {"search_docs v2"}
            assert set(page.locator("#invocations .badge").all_inner_texts()) == {"Tool error"}

            # The filtered set as CSV: streamed by uvicorn through the ASGI path.
            shown = rows.count()
            with page.expect_download() as download:
                page.locator(".exports a", has_text="Export CSV").first.click()
            exported = Path(download.value.path()).read_text().splitlines()
            assert exported[0].startswith("id,tenant,started_at") and len(exported) == 1 + shown
            assert all(",search_docs,2,error," in line for line in exported[1:])

            # A detail.
            page.locator("#invocations tbody tr a").first.click()
            page.wait_for_url("**/console/invocations/*/")
            detail = page.locator("#invocation-detail").inner_text()
            assert "claude-desktop 1.4" in detail and "production" in detail
            assert any(error in detail for error in ERRORS)
            assert '"api_token": "[redacted]"' in page.locator("#arguments").inner_text()
            page.screenshot(path=str(shots / "console-detail.png"), full_page=True)

            # The charts, drawn by the server as inline SVG.
            page.click("text=Overview")
            page.wait_for_url(f"{server.url}/console/")
            assert page.locator("svg.chart").count() == 4  # calls, latency, errors, confirmations
            assert page.locator("#chart-calls rect.bar").count() >= 60
            assert page.locator("#chart-calls rect.outcome-error").count() > 0
            assert page.locator("#chart-latency rect.p95").count() == 4  # one per tool
            assert page.locator("#chart-errors rect.error-bar").count() >= 3
            box = page.locator("#chart-calls svg").bounding_box()
            assert box is not None and box["width"] > 600 and box["height"] > 150
            page.screenshot(path=str(shots / "console-overview.png"), full_page=True)

            page.goto(f"{server.url}/console/invocations/?outcome=error")
            page.screenshot(path=str(shots / "console-invocations.png"), full_page=True)
        finally:
            browser.close()


def _metrics(server: LiveServer) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


class _Stream:
    """The session's standalone GET stream, read in a thread."""

    def __init__(self, session: McpSession) -> None:
        self.lines: list[str] = []
        self.opened, self.closed = threading.Event(), threading.Event()
        self._client = httpx.Client(timeout=httpx.Timeout(5, read=60))
        self._session = session
        threading.Thread(target=self._read, daemon=True).start()
        assert self.opened.wait(10)

    def _read(self) -> None:
        headers = self._session.headers(Accept="text/event-stream")
        try:
            with self._client.stream("GET", self._session.endpoint, headers=headers) as response:
                self.opened.set()
                for line in response.iter_lines():
                    self.lines.append(line)
        except (httpx.HTTPError, RuntimeError):
            pass
        finally:
            self.opened.set()
            self.closed.set()

    def list_changed(self) -> int:
        return sum(
            1
            for event in parse_sse(list(self.lines))
            if event.message and event.message.get("method") == "notifications/tools/list_changed"
        )

    def stop(self) -> None:
        self._client.close()
        self.closed.wait(5)


def test_metrics_count_calls_streams_and_list_changed(site: dict, django_db_blocker: Any) -> None:
    server: LiveServer = site["server"]
    with httpx.Client(timeout=30) as http:
        session = McpSession.open(http, server.endpoint(SLUG), site["key"])
        for _ in range(3):
            assert "result" in session.request("tools/call", {"name": "console_echo", "arguments": {"text": "hi"}})
        session.request("tools/call", {"name": "no_such_tool", "arguments": {}})
        # console_echo is the tenant's private tool: labelled by id, never by its name; a name
        # that is no tool is counted as "(unknown)".
        echo = f"private:{site['tool'].pk}"
        calls = ("toolbay_tool_calls_total", (("outcome", "completed"), ("tenant", SLUG), ("tool", echo)))
        timed = ("toolbay_tool_call_duration_seconds_count", (("tenant", SLUG), ("tool", echo)))
        denied = ("toolbay_tool_calls_total", (("outcome", "denied"), ("tenant", SLUG), ("tool", "(unknown)")))
        samples = _metrics(server)
        assert samples[calls] == 3 and samples[timed] == 3 and samples[denied] == 1

        stream = _Stream(session)
        try:
            wait_for(lambda: _metrics(server)[("toolbay_open_streams", ())] == 1, message="the stream to be held")
            before = _metrics(server).get(("toolbay_list_changed_sent_total", ()), 0)
            with django_db_blocker.unblock():
                tool = Tool.objects.get(pk=site["tool"].pk)
                tool.description = "v2"
                tool.save()
            wait_for(lambda: stream.list_changed() >= 1, message="list_changed on the stream")
            assert _metrics(server)[("toolbay_list_changed_sent_total", ())] == before + 1
        finally:
            stream.stop()
        wait_for(lambda: _metrics(server)[("toolbay_open_streams", ())] == 0, message="the stream to be released")

        ready = http.get(f"{server.url}/readyz")
        assert ready.status_code == 200 and ready.json()["checks"] == {"database": "ok", "redis": "ok"}


def test_json_logs_carry_the_request_id(site: dict) -> None:
    server: LiveServer = site["server"]
    response = httpx.get(f"{server.url}/console/no-such-page/", headers={"X-Request-ID": "live-trace-1"})
    assert response.status_code == 404 and response.headers["X-Request-ID"] == "live-trace-1"

    def logged() -> list[dict]:
        entries = []
        for line in site["server"].log_path.read_text().splitlines():
            try:
                entries.append(json.loads(line))
            except ValueError:
                continue
        return [entry for entry in entries if entry.get("request_id") == "live-trace-1"]

    entry = wait_for(logged, message="the request's line in the server's JSON log")[0]
    assert entry["level"] == "WARNING" and entry["logger"] == "django.request"
    assert entry["message"] == "Not Found: /console/no-such-page/"
