"""The REST API at the edge: JSON a server could not answer with or store is a 400 (never a
500), a call's arguments follow the MCP endpoint's one rule for NUL, and a missing database
is a 503 with Retry-After."""

from __future__ import annotations

import pytest
from django.db import OperationalError

from api.v1.views import tools as tool_views

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "body",
    [
        b'{"name": "\\ud800", "description": "x"}',
        b'{"name": "ok", "timeout_seconds": NaN}',
        b'{"name": "ok"',
    ],
)
def test_json_that_cannot_be_answered_or_stored_is_a_400(as_role, body) -> None:
    response = as_role("admin").post("/api/v1/tools/validate/", body, content_type="application/json")
    assert response.status_code == 400
    assert "JSON parse error" in response.json()["detail"]


def test_a_test_call_takes_nul_like_an_mcp_call(as_role, acme, make_tool) -> None:
    tool = make_tool("echo", tenant=acme)
    response = as_role("admin").post(
        f"/api/v1/tools/{tool.pk}/test-call/", {"arguments": {"text": "a\x00b"}}, format="json"
    )
    assert response.status_code == 200
    assert response.json()["result"]["content"][0]["text"] == "a\x00b"


def test_a_missing_database_is_a_503_with_retry_after(as_role, monkeypatch) -> None:
    def unreachable(*args, **kwargs):
        raise OperationalError("connection to server at 127.0.0.1 failed: Connection refused")

    monkeypatch.setattr(tool_views.ToolViewSet, "get_queryset", unreachable)
    client = as_role("admin")
    client.raise_request_exception = False
    response = client.get("/api/v1/tools/")
    assert response.status_code == 503 and response["Retry-After"] == "2"
    assert "unavailable" in response.json()["detail"].lower()
