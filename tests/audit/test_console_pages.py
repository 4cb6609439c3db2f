"""What an operator sees on the console's pages: filters, search, keyset pages, details, charts."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from audit.models import AuditEvent
from tenants.services import api_key_revoke


def _ids(response) -> list[int]:
    """Invocation ids listed on a page, in order."""
    return [int(pk) for pk in re.findall(r'href="/console/(?:invocations|changes)/(\d+)/"', response.content.decode())]


@pytest.fixture
def mixed(acme, make_invocation, make_key):
    key, _ = make_key(acme, "ci key")
    rows = {
        "ok": make_invocation(acme, "search_docs", ago=timedelta(minutes=5), key_id=key.pk, key_label="ci key (tb_x)"),
        "error": make_invocation(acme, "search_docs", "error", error_message="Upstream said 502 Bad Gateway"),
        "denied": make_invocation(acme, "forbidden_thing", "denied", error_message="Unknown or forbidden tool"),
        "timeout": make_invocation(acme, "slow_report", "timed_out", error_message="timed out after 30 seconds"),
        "old": make_invocation(acme, "slow_report", ago=timedelta(days=3)),
        "session": make_invocation(
            acme, "echo", session_id="sess-123", run_id="run-9", is_task=True, protocol_version="2025-11-25"
        ),
        "modern": make_invocation(acme, "echo", protocol_version="2026-07-28", ago=timedelta(days=2)),
    }
    return key, rows


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({}, ["ok", "error", "denied", "timeout", "old", "session", "modern"]),
        ({"tool": "search_docs"}, ["ok", "error"]),
        ({"outcome": "timed_out"}, ["timeout"]),
        ({"outcome": "denied", "tool": "forbidden_thing"}, ["denied"]),
        ({"key": "KEY"}, ["ok"]),
        ({"key": "none"}, ["error", "denied", "timeout", "old", "session", "modern"]),
        ({"range": "24h"}, ["ok", "error", "denied", "timeout", "session"]),
        ({"q": "bad gateway"}, ["error"]),  # error text, any case
        ({"q": "SLOW_rep"}, ["timeout", "old"]),  # tool name
        ({"q": "no such text anywhere"}, []),
        ({"revision": "2026-07-28"}, ["modern"]),
        ({"revision": "2025-11-25", "tool": "echo"}, ["session"]),
        ({"session": "sess-123"}, ["session"]),
        ({"run": "run-9"}, ["session"]),
    ],
)
def test_invocation_filters(operator_client, mixed, params, expected):
    key, rows = mixed
    params = {name: (key.pk if value == "KEY" else value) for name, value in params.items()}
    response = operator_client.get("/console/invocations/", params)
    assert response.status_code == 200
    assert sorted(_ids(response)) == sorted(rows[name].pk for name in expected)


def test_time_window_filters(operator_client, mixed):
    _, rows = mixed
    now = timezone.now()
    since = (now - timedelta(days=4)).strftime("%Y-%m-%dT%H:%M")
    until = (now - timedelta(days=2)).strftime("%Y-%m-%dT%H:%M")
    response = operator_client.get("/console/invocations/", {"since": since, "until": until})
    assert _ids(response) == [rows["old"].pk]


def test_bad_filters_are_a_400_with_the_reason(operator_client, mixed):
    for params in ({"outcome": "exploded"}, {"since": "yesterday-ish"}, {"key": "abc"}):
        response = operator_client.get("/console/invocations/", params)
        assert response.status_code == 400
        assert 'class="errorlist"' in response.content.decode()
        assert operator_client.get("/console/invocations/export.csv", params).status_code == 400


def test_revoked_keys_still_filter(operator_client, mixed):
    key, rows = mixed
    api_key_revoke(key=key)
    assert _ids(operator_client.get("/console/invocations/", {"key": key.pk})) == [rows["ok"].pk]


def _link(response, rel: str) -> str:
    match = re.search(rf'href="\?([^"]*)" rel="{rel}"', response.content.decode())
    return "/console/invocations/?" + match.group(1).replace("&amp;", "&") if match else ""


def test_keyset_pages_walk_every_row_once_without_offset(operator_client, acme, make_invocation):
    moment = timezone.now() - timedelta(hours=1)
    made = [make_invocation(acme, f"tool_{i % 3}", at=moment - timedelta(seconds=i // 2)) for i in range(120)]
    expected = [row.pk for row in sorted(made, key=lambda row: (row.started_at, row.pk), reverse=True)]
    pages, url = [], "/console/invocations/?tenant=acme"
    while url:
        with CaptureQueriesContext(connection) as queries:
            response = operator_client.get(url)
        assert not any(" OFFSET " in q["sql"].upper() for q in queries.captured_queries)
        pages.append(_ids(response))
        url = _link(response, "next")
    assert [pk for page in pages for pk in page] == expected  # ties on started_at are broken by id
    assert [len(page) for page in pages] == [50, 50, 20]
    # ...and back: "Newer" from the last page is the middle page, and from there the first.
    middle = operator_client.get(_link(response, "prev"))
    assert _ids(middle) == pages[1]
    first = operator_client.get(_link(middle, "prev"))
    assert _ids(first) == pages[0] and _link(first, "prev") == ""


def test_malformed_cursors_show_the_first_page(operator_client, mixed):
    first = _ids(operator_client.get("/console/invocations/"))
    for cursor in ("garbage", "12.x", "99999999999999999999999999.1"):
        assert _ids(operator_client.get("/console/invocations/", {"after": cursor})) == first


def test_invocation_detail_shows_redacted_arguments_and_links(operator_client, acme, make_invocation):
    schema = {"type": "object", "properties": {"q": {"type": "string"}, "token": {"type": "string", "writeOnly": True}}}
    row = make_invocation(
        acme,
        "lookup",
        "error",
        error_message="backend <b>exploded</b>",
        arguments={"q": "weather", "token": "hunter2"},
        input_schema=schema,
        session_id="sess-42",
        client={"name": "claude-desktop", "version": "1.2"},
    )
    body = operator_client.get(f"/console/invocations/{row.pk}/").content.decode()
    assert "weather" in body and "[redacted]" in body and "hunter2" not in body
    assert "backend &lt;b&gt;exploded&lt;/b&gt;" in body  # escaped, never markup
    assert "claude-desktop 1.2" in body
    assert "?tenant=acme&amp;session=sess-42" in body


def test_invocation_detail_links_its_trace(operator_client, acme, make_invocation, settings):
    traced = make_invocation(acme, "lookup", trace_id="4bf92f3577b34da6a3ce929d0e0e4736")
    untraced = make_invocation(acme, "lookup")
    assert untraced.trace_id is None
    settings.TOOLBAY_TRACE_URL = "https://tempo.example/trace/{trace_id}"
    body = operator_client.get(f"/console/invocations/{traced.pk}/").content.decode()
    assert '<a href="https://tempo.example/trace/4bf92f3577b34da6a3ce929d0e0e4736"' in body
    assert "tempo.example" not in operator_client.get(f"/console/invocations/{untraced.pk}/").content.decode()
    settings.TOOLBAY_TRACE_URL = ""
    body = operator_client.get(f"/console/invocations/{traced.pk}/").content.decode()
    assert "4bf92f3577b34da6a3ce929d0e0e4736" in body and "tempo.example" not in body


def test_dashboard_charts(operator_client, acme, globex, make_invocation):
    for i in range(6):
        make_invocation(acme, "fast", duration_ms=10 + i, ago=timedelta(minutes=i))
    make_invocation(acme, "slow", duration_ms=900, ago=timedelta(minutes=2))
    make_invocation(acme, "slow", "failed", error_message="internal error (reference abc)", duration_ms=1200)
    make_invocation(acme, "slow", "failed", error_message="internal error (reference abc)", duration_ms=1100)
    make_invocation(acme, "fast", "error", error_message="=HYPERLINK(evil)")
    make_invocation(acme, "fast", ago=timedelta(hours=3))  # outside the hour, inside the day
    make_invocation(globex, "globex_only", "failed", error_message="globex trouble")

    body = operator_client.get("/console/", {"window": "hour"}).content.decode()
    assert body.count("<svg") == 4
    assert re.search(r'id="stat-calls">10<', body)
    assert len(re.findall(r'<rect class="bar outcome-completed"', body)) == 6  # six minutes with completed calls
    assert 'class="bar outcome-failed"' in body and 'class="bar outcome-error"' in body
    assert re.search(r"slow p95: 1,\d{3}\.\d ms", body) and "fast p50" in body
    assert "internal error (reference abc)" in body and "=HYPERLINK(evil)" in body
    assert "globex" not in body

    day = operator_client.get("/console/", {"window": "day"}).content.decode()
    assert re.search(r'id="stat-calls">11<', day)
    assert "15-minute averages" in day
    assert operator_client.get("/console/", {"window": "year"}).status_code == 200  # falls back to the hour


def test_dashboard_with_nothing_to_show(operator_client, acme):
    body = operator_client.get("/console/").content.decode()
    assert body.count("<svg") == 4 and "No timed calls in this window." in body and "No errors in this window." in body
    assert "No confirmations in this window." in body


def test_change_log_and_diff(operator_client, acme, make_key):
    key, _ = make_key(acme, "deploy bot")
    api_key_revoke(key=key)
    events = AuditEvent.objects.filter(object_type="tenants.ApiKey", object_id=str(key.pk)).order_by("id")
    created, revoked = events
    listing = operator_client.get("/console/changes/", {"object_type": "tenants.ApiKey"})
    assert _ids(listing) == [revoked.pk, created.pk]
    assert _ids(operator_client.get("/console/changes/", {"action": "created", "q": "deploy bot"})) == [created.pk]
    body = operator_client.get(f"/console/changes/{revoked.pk}/").content.decode()
    assert "revoked_at" in body and "—" in body  # before: none
    assert "key_hash" not in body or "[redacted]" in body
    created_body = operator_client.get(f"/console/changes/{created.pk}/").content.decode()
    assert "deploy bot" in created_body and key.key_hash not in created_body


def test_login_page_and_redirect_back(client, acme_operator):
    page = client.get("/console/login/?next=/console/invocations/")
    assert page.status_code == 200 and 'name="password"' in page.content.decode()
    response = client.post(
        "/console/login/", {"username": "acme-op", "password": "pw", "next": "/console/invocations/"}
    )
    assert response.status_code == 302 and response["Location"] == "/console/invocations/"
    assert client.get("/console/invocations/").status_code == 200
    assert client.post("/console/logout/").status_code == 302
    assert client.get("/console/invocations/").status_code == 302


def test_pages_are_not_cached_by_browsers(operator_client, mixed):
    response = operator_client.get("/console/invocations/")
    assert "no-store" in response["Cache-Control"] or "max-age=0" in response["Cache-Control"]
    assert operator_client.post("/console/invocations/").status_code in (403, 405)
