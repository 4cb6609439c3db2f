"""Structured logs: LOG_FORMAT=json writes one object per line with the request, session
and call ids that were in context."""

from __future__ import annotations

import json
import logging

import pytest

from mcp_platform.logs import (
    JsonFormatter,
    LogContextFilter,
    enter_mcp_log_context,
    leave_log_context,
    log_context,
    new_request_id,
)


def _format(message: str = "hello %s", *args, **extra) -> dict:
    record = logging.LogRecord("toolbay.test", logging.WARNING, __file__, 1, message, args or ("world",), None)
    for name, value in extra.items():
        setattr(record, name, value)
    LogContextFilter().filter(record)
    return json.loads(JsonFormatter().format(record))


def test_json_lines_carry_the_context_ids():
    with log_context(request_id="req-1", session_id="sess-1", call_id="call-1"):
        entry = _format()
    assert entry["message"] == "hello world" and entry["level"] == "WARNING" and entry["logger"] == "toolbay.test"
    assert (entry["request_id"], entry["session_id"], entry["call_id"]) == ("req-1", "sess-1", "call-1")
    assert entry["time"].endswith("+00:00")
    outside = _format()
    assert "request_id" not in outside and "session_id" not in outside


def test_extras_and_exceptions_are_kept():
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    record.tenant = "acme"
    record.weird = object()
    LogContextFilter().filter(record)
    entry = json.loads(JsonFormatter().format(record))
    assert entry["tenant"] == "acme" and entry["weird"].startswith("<object")
    assert "ValueError: boom" in entry["exception"]


def test_nested_contexts_restore():
    with log_context(request_id="outer"):
        with log_context(session_id="inner"):
            assert _format()["request_id"] == "outer" and _format()["session_id"] == "inner"
        assert "session_id" not in _format()


@pytest.mark.parametrize(
    ("offered", "kept"), [("abc-123", True), ("x" * 65, False), ("bad id\n", False), (None, False), (b"proxy.1", True)]
)
def test_request_ids_from_proxies_are_only_taken_when_plain(offered, kept):
    made = new_request_id(offered)
    expected = offered.decode() if isinstance(offered, bytes) else offered
    assert (made == expected) is kept and len(made) <= 64


def test_mcp_requests_log_their_session():
    scope = {"headers": [(b"x-request-id", b"edge-7"), (b"mcp-session-id", b"s-42"), (b"accept", b"*/*")]}
    tokens = enter_mcp_log_context(scope)
    try:
        entry = _format()
    finally:
        leave_log_context(tokens)
    assert entry["request_id"] == "edge-7" and entry["session_id"] == "s-42"


def test_mcp_requests_without_a_proxy_id_get_one_when_they_log():
    tokens = enter_mcp_log_context({"headers": []})
    try:
        first, second = _format(), _format()
    finally:
        leave_log_context(tokens)
    assert len(first["request_id"]) == 16 and first["request_id"] == second["request_id"]


def test_django_requests_get_an_id_echoed_and_logged(client, db, caplog):
    caplog.handler.addFilter(LogContextFilter())
    with caplog.at_level(logging.WARNING, logger="django.request"):
        response = client.get("/console/nowhere/", HTTP_X_REQUEST_ID="trace-99")
    assert response.status_code == 404 and response["X-Request-ID"] == "trace-99"
    record = next(r for r in caplog.records if r.name == "django.request")
    assert record.request_id == "trace-99"
    assert len(client.get("/healthz")["X-Request-ID"]) == 16


def test_log_format_setting_is_checked(monkeypatch):
    import importlib

    from django.core.exceptions import ImproperlyConfigured

    import mcp_platform.settings as project_settings

    monkeypatch.setenv("LOG_FORMAT", "xml")
    with pytest.raises(ImproperlyConfigured, match="LOG_FORMAT"):
        importlib.reload(project_settings)
    monkeypatch.setenv("LOG_FORMAT", "json")
    reloaded = importlib.reload(project_settings)
    assert reloaded.LOGGING["handlers"]["console"]["formatter"] == "json"
    assert reloaded.CELERY_WORKER_HIJACK_ROOT_LOGGER is False
    monkeypatch.delenv("LOG_FORMAT")
    importlib.reload(project_settings)
