"""/metrics (Prometheus text), /readyz, and the call counters fed by the invocation journal."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest
import redis
from django.conf import settings
from django.test import Client, override_settings
from prometheus_client.parser import text_string_to_metric_families

from audit.journal import JOURNAL_KEY, invocation_row, journal
from mcp_platform import health
from mcp_platform.metrics import CALLS, LATENCY_BUCKETS
from tools_app.backends.packaged.sandbox import sandbox_readiness

TOKEN = "scrape-token"
SCRAPER = {"HTTP_AUTHORIZATION": f"Bearer {TOKEN}"}


@pytest.fixture(autouse=True)
def _fresh_counters() -> Iterator[None]:
    CALLS.clear()
    yield
    CALLS.clear()


@pytest.fixture(autouse=True)
def _metrics_token(settings) -> None:
    # The tests run with DEBUG=0, where /metrics answers only a scrape that sends the token.
    settings.METRICS_TOKEN = TOKEN


def _scrape(client: Client, **headers: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = client.get("/metrics", **(headers or SCRAPER))
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def _row(tenant, tool: str, outcome: str, duration_ms: float | None):
    return invocation_row(
        tenant_id=tenant.pk,
        key_id=None,
        key_label="anonymous",
        tool_name=tool,
        outcome=outcome,
        duration_ms=duration_ms,
        started_at=time.time(),
    )


def test_calls_by_tenant_tool_outcome_and_latency(client, acme, globex, make_tool):
    make_tool("echo")
    make_tool("report")
    journal.append_now(_row(acme, "echo", "completed", 4.0))
    journal.append_now(_row(acme, "echo", "completed", 40.0))
    journal.append_now(_row(acme, "echo", "timed_out", 30_000.0))
    journal.append_now(_row(globex, "report", "denied", None))
    samples = _scrape(client)
    calls = {labels: value for (name, labels), value in samples.items() if name == "toolbay_tool_calls_total"}
    assert calls == {
        (("outcome", "completed"), ("tenant", "acme"), ("tool", "echo")): 2.0,
        (("outcome", "timed_out"), ("tenant", "acme"), ("tool", "echo")): 1.0,
        (("outcome", "denied"), ("tenant", "globex"), ("tool", "report")): 1.0,
    }
    echo = (("tenant", "acme"), ("tool", "echo"))
    bucket = "toolbay_tool_call_duration_seconds_bucket"
    assert samples[(bucket, (("le", "0.005"), *echo))] == 1.0
    assert samples[(bucket, (("le", "0.05"), *echo))] == 2.0
    assert samples[(bucket, (("le", "30.0"), *echo))] == 3.0  # 30 s exactly is "le 30"
    assert samples[(bucket, (("le", "+Inf"), *echo))] == 3.0
    assert samples[("toolbay_tool_call_duration_seconds_count", echo)] == 3.0
    assert samples[("toolbay_tool_call_duration_seconds_sum", echo)] == pytest.approx(30.044)
    assert len([k for k in samples if k[0] == bucket and dict(k[1])["tool"] == "echo"]) == len(LATENCY_BUCKETS) + 1
    # A call without a duration (denied before running) is counted, not timed.
    assert not any(k[0] == bucket and dict(k[1])["tool"] == "report" for k in samples)


@override_settings(AUDIT_INVOCATIONS=False)
def test_counted_even_when_rows_are_not_written(client, acme, make_tool):
    make_tool("echo")
    redis_client = redis.Redis.from_url(settings.REDIS_URL)
    before = redis_client.xlen(JOURNAL_KEY)
    journal.append_now(_row(acme, "echo", "completed", 1.0))
    journal.append_now(_row(acme, "echo", "error", 1.0))
    assert redis_client.xlen(JOURNAL_KEY) == before  # counted, not appended
    redis_client.close()
    samples = _scrape(client)
    assert samples[("toolbay_tool_calls_total", (("outcome", "error"), ("tenant", "acme"), ("tool", "echo")))] == 1
    assert samples[("toolbay_tool_calls_total", (("outcome", "completed"), ("tenant", "acme"), ("tool", "echo")))] == 1


def test_queue_depth_open_streams_and_fan_out_are_exposed(client, db, monkeypatch):
    redis_client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    redis_client.delete(*health.CELERY_QUEUES, "toolbay.long\x06\x166")
    redis_client.rpush("toolbay.short", "a", "b", "c")
    redis_client.rpush("toolbay.long\x06\x166", "urgent")  # a priority-6 message of the long queue
    monkeypatch.setattr("mcp_platform.health.streams_held", lambda: 7)
    try:
        samples = _scrape(client)
    finally:
        redis_client.delete(*health.CELERY_QUEUES, "toolbay.long\x06\x166")
        redis_client.close()
    assert samples[("toolbay_celery_queue_length", (("queue", "toolbay.short"),))] == 3
    assert samples[("toolbay_celery_queue_length", (("queue", "toolbay.long"),))] == 1
    assert samples[("toolbay_open_streams", ())] == 7
    assert ("toolbay_list_changed_sent_total", ()) in samples
    assert any(name.startswith("process_") or name.startswith("python_") for name, _ in samples)


def test_metrics_token(client, db):
    with override_settings(METRICS_TOKEN="s3cret"):
        assert client.get("/metrics").status_code == 401
        assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
        assert _scrape(client, HTTP_AUTHORIZATION="Bearer s3cret")


@pytest.mark.parametrize("debug", [False, True])
def test_without_a_token_production_serves_no_one(client, db, debug: bool):
    with override_settings(METRICS_TOKEN="", DEBUG=debug):
        response = client.get("/metrics")
        with_header = client.get("/metrics", HTTP_AUTHORIZATION="Bearer anything")
    if debug:  # a laptop: open
        assert response.status_code == with_header.status_code == 200
    else:
        assert response.status_code == with_header.status_code == 403
        assert b"METRICS_TOKEN" in response.content and b"toolbay_" not in response.content


def test_private_tools_are_labelled_by_id(client, acme, globex, make_tool):
    make_tool("lookup")  # a platform tool
    secret = make_tool("acme-merger-plans", tenant=acme)
    shadow = make_tool("lookup", tenant=globex)  # globex's own lookup shadows the platform's
    journal.append_now(_row(acme, "acme-merger-plans", "completed", 1.0))
    journal.append_now(_row(acme, "lookup", "completed", 1.0))
    journal.append_now(_row(globex, "lookup", "completed", 1.0))
    response = client.get("/metrics", **SCRAPER)
    assert b"acme-merger-plans" not in response.content
    calls = {labels: value for (name, labels), value in _scrape(client).items() if name == "toolbay_tool_calls_total"}
    assert calls == {
        (("outcome", "completed"), ("tenant", "acme"), ("tool", f"private:{secret.pk}")): 1.0,
        (("outcome", "completed"), ("tenant", "acme"), ("tool", "lookup")): 1.0,
        (("outcome", "completed"), ("tenant", "globex"), ("tool", f"private:{shadow.pk}")): 1.0,
    }


def test_names_that_are_no_tool_are_one_series(client, acme, make_tool):
    make_tool("echo")
    for number in range(50):
        journal.append_now(_row(acme, f"made-up-{number}", "denied", None))
    journal.append_now(_row(acme, "echo", "completed", 2.0))
    journal.append_now(_row(acme, "made-up-late", "denied", 3.0))
    samples = _scrape(client)
    tools = {dict(labels)["tool"] for name, labels in samples if name.startswith("toolbay_tool_call")}
    assert tools == {"echo", "(unknown)"}
    unknown = (("outcome", "denied"), ("tenant", "acme"), ("tool", "(unknown)"))
    assert samples[("toolbay_tool_calls_total", unknown)] == 51
    assert samples[("toolbay_tool_call_duration_seconds_count", (("tenant", "acme"), ("tool", "(unknown)")))] == 1
    # The scrape folded the made-up names away: the process no longer holds them.
    calls, latency = CALLS.snapshot()
    assert {key[1] for key in calls} | {key[1] for key in latency} == {"echo", "(unknown)"}
    journal.append_now(_row(acme, "made-up-0", "denied", None))
    assert _scrape(client)[("toolbay_tool_calls_total", unknown)] == 52


def test_resource_reads_and_prompts_are_no_tool_calls(client, acme, make_tool):
    make_tool("echo")
    journal.append_now(invocation_row(
        tenant_id=acme.pk, key_id=None, key_label="anonymous", tool_name="file:///etc/hosts", kind="resource",
        outcome="completed", duration_ms=1.0, started_at=time.time(),
    ))  # fmt: skip
    assert not any(name.startswith("toolbay_tool_call") for name, _ in _scrape(client))


def test_readyz_ok(client, db):
    response = client.get("/readyz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok" and body["checks"] == {"database": "ok", "redis": "ok"}
    assert body["sandbox"] == sandbox_readiness()  # bubblewrap here; see tests/sandbox for the others
    # Packaged servers: informative only (no runner here does not make the web process unready).
    assert body["packaged_servers"] == {
        "runners": 0,
        "sandbox": [],
        "untrusted_packages": "no runner is running",
        "limits": [],
        "reasons": [],
    }
    assert client.get("/healthz").status_code == 200


def test_readyz_names_what_failed(client, db, monkeypatch):
    with override_settings(REDIS_URL="redis://127.0.0.1:1/0"):  # nothing listens on port 1
        response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["status"] == "unavailable"
    assert response.json()["checks"] == {"database": "ok", "redis": "failed"}

    def broken() -> None:
        raise OSError("connection refused")

    monkeypatch.setattr(health, "_database_ready", broken)
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"] == {"database": "failed", "redis": "ok"}
    assert "refused" not in response.content.decode()  # what failed, not why


def test_a_scrape_survives_a_broker_outage(client, db):
    with override_settings(CELERY_BROKER_URL="redis://127.0.0.1:1/0"):
        response = client.get("/metrics", **SCRAPER)
    assert response.status_code == 200
    assert re.search(rb"^toolbay_open_streams ", response.content, re.M)


def test_the_mcp_engine_imports_its_counter_without_django_set_up():
    """The list_changed counter adds no Django app or model import to mcp_platform.mcp."""
    import subprocess
    import sys

    env = {key: value for key, value in __import__("os").environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    code = "import mcp_platform.mcp.transport.standalone, sys; sys.exit('django.apps' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], env=env, cwd=settings.BASE_DIR).returncode == 0


def test_a_process_nobody_scrapes_holds_a_bounded_number_of_names(acme, monkeypatch):
    monkeypatch.setattr("mcp_platform.metrics.MAX_TOOL_KEYS", 3)
    for number in range(20):
        journal.append_now(_row(acme, f"made-up-{number}", "denied", None))
    calls, _ = CALLS.snapshot()
    assert len(calls) == 4  # three names, then one series for every later one
    assert calls[(acme.pk, "(unknown)", "denied")] == 17
