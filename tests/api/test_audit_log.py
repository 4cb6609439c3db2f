"""/api/v1/invocations/ and /api/v1/audit-events/: the audit log, read-only, for operators."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from api.services import access_token_create
from audit.models import AuditEvent, Invocation
from tests.api.pages import ids

pytestmark = pytest.mark.django_db


def invocation(tenant, tool_name: str = "echo", minutes_ago: int = 0, **fields: Any) -> Invocation:
    started = timezone.now() - timedelta(minutes=minutes_ago)
    values: dict[str, Any] = {
        "tenant": tenant,
        "tool_name": tool_name,
        "outcome": Invocation.Outcome.COMPLETED,
        "key_label": "bot (0123456789ab)",
        "arguments": {"text": "hi"},
        "started_at": started,
        "finished_at": started + timedelta(milliseconds=5),
        "duration_ms": 5.0,
    }
    values.update(fields)
    return Invocation.objects.create(**values)


@pytest.fixture
def calls(acme, globex) -> dict[str, Invocation]:
    return {
        "old": invocation(acme, "echo", minutes_ago=90),
        "failed": invocation(acme, "add", minutes_ago=30, outcome="invalid_arguments", error_message="bad a"),
        "new": invocation(acme, "echo", minutes_ago=1, key_id=7),
        "globex": invocation(globex, "echo", minutes_ago=5),
    }


@pytest.mark.parametrize("role", ["owner", "admin", "operator"])
def test_operators_read_their_tenants_invocations(role, as_role, calls) -> None:
    client = as_role(role)
    assert ids(client.get("/api/v1/invocations/")) == [calls[n].pk for n in ("new", "failed", "old")]
    row = client.get(f"/api/v1/invocations/{calls['failed'].pk}/").json()
    assert (row["tenant"], row["tool_name"], row["outcome"], row["error_message"]) == (
        "acme",
        "add",
        "invalid_arguments",
        "bad a",
    )
    assert row["arguments"] == {"text": "hi"} and row["key_label"] == "bot (0123456789ab)"


def test_viewers_read_no_invocations(as_role, calls) -> None:
    assert ids(as_role("viewer").get("/api/v1/invocations/")) == []
    assert as_role("viewer").get(f"/api/v1/invocations/{calls['new'].pk}/").status_code == 404


def test_other_tenants_invocations_look_missing(globex_admin, client_for, calls) -> None:
    client = client_for(globex_admin)
    assert ids(client.get("/api/v1/invocations/")) == [calls["globex"].pk]
    assert ids(client.get("/api/v1/invocations/?tenant=acme")) == []
    assert client.get(f"/api/v1/invocations/{calls['new'].pk}/").status_code == 404


def test_superuser_reads_every_tenants_invocations(superuser, client_for, calls) -> None:
    assert ids(client_for(superuser).get("/api/v1/invocations/")) == [
        calls[n].pk for n in ("new", "globex", "failed", "old")
    ]


def test_invocation_filters(as_role, calls) -> None:
    client = as_role("operator")
    assert ids(client.get("/api/v1/invocations/?outcome=invalid_arguments")) == [calls["failed"].pk]
    assert ids(client.get("/api/v1/invocations/?tool=echo")) == [calls["new"].pk, calls["old"].pk]
    assert ids(client.get("/api/v1/invocations/?key=7")) == [calls["new"].pk]
    Invocation.objects.filter(pk=calls["old"].pk).update(protocol_version="2026-07-28")
    assert ids(client.get("/api/v1/invocations/?revision=2026-07-28")) == [calls["old"].pk]
    assert client.get(f"/api/v1/invocations/{calls['old'].pk}/").json()["protocol_version"] == "2026-07-28"
    since = (timezone.now() - timedelta(hours=1)).isoformat()
    until = (timezone.now() - timedelta(minutes=10)).isoformat()
    assert ids(client.get("/api/v1/invocations/", {"since": since, "until": until})) == [calls["failed"].pk]


@pytest.mark.parametrize(
    ("query", "field"),
    [("?outcome=exploded", "outcome"), ("?since=yesterday", "since"), ("?key=abc", "key"), ("?key=0", "key")],
)
def test_invalid_filters_name_the_parameter(as_role, calls, query, field) -> None:
    response = as_role("operator").get(f"/api/v1/invocations/{query}")
    assert response.status_code == 400
    assert list(response.json()) == [field]


def test_invocations_page_by_cursor(as_role, calls) -> None:
    client = as_role("operator")
    page = client.get("/api/v1/invocations/?page_size=2").json()
    assert [row["id"] for row in page["results"]] == [calls["new"].pk, calls["failed"].pk]
    page = client.get(page["next"]).json()
    assert [row["id"] for row in page["results"]] == [calls["old"].pk] and page["next"] is None
    assert client.get("/api/v1/invocations/?cursor=garbage").status_code == 404


@pytest.mark.parametrize("path", ["/api/v1/invocations/", "/api/v1/audit-events/"])
def test_the_audit_log_is_read_only(superuser, client_for, calls, path) -> None:
    client = client_for(superuser)
    row_id = client.get(path).json()["results"][0]["id"]
    assert client.post(path, {}, format="json").status_code == 405
    assert client.put(f"{path}{row_id}/", {}, format="json").status_code == 405
    assert client.patch(f"{path}{row_id}/", {}, format="json").status_code == 405
    assert client.delete(f"{path}{row_id}/").status_code == 405


def bearer(user) -> APIClient:
    _, raw = access_token_create(user=user, name="script")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def test_api_changes_are_audited_like_the_admins(members, acme, make_key) -> None:
    script = bearer(members["admin"])
    created = script.post(
        "/api/v1/tools/",
        {"tenant": "acme", "name": "lookup", "description": "Looks.", "backend_config": {"handler": "demo.echo"}},
        format="json",
    ).json()
    key, raw = make_key(acme, "bot")
    script.post(f"/api/v1/api-keys/{key.pk}/revoke/")

    tool_event = AuditEvent.objects.get(object_type="tools_app.Tool", object_id=str(created["id"]))
    assert (tool_event.source, tool_event.action, tool_event.actor_label, tool_event.tenant_slug) == (
        "api",
        "created",
        "acme-admin",
        "acme",
    )
    revoked = AuditEvent.objects.get(object_type="tenants.ApiKey", object_id=str(key.pk), action="updated")
    assert revoked.source == "api" and "revoked_at" in revoked.changes
    assert raw not in str(revoked.changes)

    rows = as_rows(bearer(members["operator"]).get("/api/v1/audit-events/?object_type=tools_app.Tool"))
    assert [(r["action"], r["object_id"], r["actor"], r["source"]) for r in rows] == [
        ("created", str(created["id"]), "acme-admin", "api")
    ]


def as_rows(response) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.content
    return response.json()["results"]


def test_audit_events_are_scoped_to_operated_tenants(members, globex_admin, superuser, client_for, make_tool) -> None:
    make_tool("platform-tool")  # a platform object: its event belongs to no tenant
    bearer(members["admin"]).post("/api/v1/api-keys/", {"tenant": "acme", "name": "ci"}, format="json")
    bearer(globex_admin).post("/api/v1/api-keys/", {"tenant": "globex", "name": "ci"}, format="json")

    acme_rows = as_rows(client_for(members["operator"]).get("/api/v1/audit-events/?object_type=tenants.ApiKey"))
    assert [r["tenant"] for r in acme_rows] == ["acme"]
    assert all(r["tenant"] == "acme" for r in as_rows(client_for(members["operator"]).get("/api/v1/audit-events/")))
    assert as_rows(client_for(members["viewer"]).get("/api/v1/audit-events/")) == []

    platform = AuditEvent.objects.get(object_type="tools_app.Tool")
    assert client_for(members["owner"]).get(f"/api/v1/audit-events/{platform.pk}/").status_code == 404
    assert client_for(superuser).get(f"/api/v1/audit-events/{platform.pk}/").json()["tenant"] == ""

    globex_rows = as_rows(client_for(globex_admin).get("/api/v1/audit-events/?tenant=acme"))
    assert globex_rows == []


def test_audit_event_filters(members, client_for) -> None:
    script = bearer(members["admin"])
    script.post("/api/v1/api-keys/", {"tenant": "acme", "name": "ci"}, format="json")
    client = client_for(members["operator"])
    assert [r["action"] for r in as_rows(client.get("/api/v1/audit-events/?action=created&source=api"))] == ["created"]
    assert as_rows(client.get("/api/v1/audit-events/?actor=nobody")) == []
    assert as_rows(client.get("/api/v1/audit-events/?actor=acme-adm"))[0]["actor"] == "acme-admin"
    response = client.get("/api/v1/audit-events/?source=telepathy")
    assert response.status_code == 400 and list(response.json()) == ["source"]
