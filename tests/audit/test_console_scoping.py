"""Tenant scoping of every console page and export: an operator of acme gets 404 for
globex's rows, whether asked by id or by filter; superusers see every tenant."""

from __future__ import annotations

import json

import pytest

from audit.models import AuditEvent

LIST_PAGES = ["/console/", "/console/invocations/", "/console/changes/"]
EXPORTS = [
    "/console/invocations/export.csv",
    "/console/invocations/export.json",
    "/console/changes/export.csv",
    "/console/changes/export.json",
]


def _body(response) -> str:
    if getattr(response, "streaming", False):
        return b"".join(response.streaming_content).decode()
    return response.content.decode()


@pytest.mark.parametrize("url", LIST_PAGES + EXPORTS + ["/console/invocations/1/", "/console/changes/1/"])
def test_anonymous_is_sent_to_the_login_page(client, db, url):
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith("/console/login/?next=")


@pytest.mark.parametrize("role", ["viewer", None])
def test_users_without_an_operator_role_are_refused(make_user, acme, role):
    from django.test import Client

    client = Client()
    client.force_login(make_user(f"user-{role}", acme if role else None, role=role or "viewer"))
    for url in LIST_PAGES + EXPORTS:
        response = client.get(url)
        assert response.status_code == 403, url
        assert "acme" not in response.content.decode()


def test_operator_lists_only_their_tenant(operator_client, two_tenant_rows):
    for url in LIST_PAGES:
        body = _body(operator_client.get(url))
        assert "acme" in body
        assert "globex" not in body, url


@pytest.mark.parametrize("url", EXPORTS)
def test_exports_hold_only_the_operators_tenant(operator_client, two_tenant_rows, url):
    response = operator_client.get(url)
    assert response.status_code == 200 and response.streaming
    body = _body(response)
    assert "acme" in body and "globex" not in body


def test_details_of_another_tenant_answer_404(operator_client, superuser_client, two_tenant_rows):
    acme_row, globex_row = two_tenant_rows["acme"], two_tenant_rows["globex"]
    acme_event, globex_event = two_tenant_rows["acme_event"], two_tenant_rows["globex_event"]
    assert operator_client.get(f"/console/invocations/{acme_row.pk}/").status_code == 200
    assert operator_client.get(f"/console/changes/{acme_event.pk}/").status_code == 200
    for kind, row in (("invocations", globex_row), ("changes", globex_event)):
        url = f"/console/{kind}/{row.pk}/"
        missing = operator_client.get(f"/console/{kind}/987654321/")
        forbidden = operator_client.get(url)
        assert forbidden.status_code == missing.status_code == 404
        assert superuser_client.get(url).status_code == 200


@pytest.mark.parametrize("url", LIST_PAGES + EXPORTS)
def test_filtering_by_another_tenant_answers_404(operator_client, superuser_client, two_tenant_rows, url):
    assert operator_client.get(url, {"tenant": "globex"}).status_code == 404
    assert operator_client.get(url, {"tenant": "no-such-tenant"}).status_code == 404
    assert operator_client.get(url, {"tenant": "acme"}).status_code == 200
    allowed = superuser_client.get(url, {"tenant": "globex"})
    assert allowed.status_code == 200
    body = _body(allowed)
    assert "acme_tool" not in body


def test_filtering_by_another_tenants_key_answers_404(operator_client, two_tenant_rows, make_key, acme, globex):
    acme_key, _ = make_key(acme, "acme key")
    globex_key, _ = make_key(globex, "globex key")
    for url in ("/console/invocations/", "/console/invocations/export.csv"):
        assert operator_client.get(url, {"key": acme_key.pk}).status_code == 200
        assert operator_client.get(url, {"key": globex_key.pk}).status_code == 404
        assert operator_client.get(url, {"key": 987654321}).status_code == 404


def test_platform_changes_are_for_superusers_only(operator_client, superuser_client, two_tenant_rows, make_tool):
    tool = make_tool("platform_wide_tool")  # a tool of no tenant: its events belong to none
    event = AuditEvent.objects.filter(object_type="tools_app.Tool", object_id=str(tool.pk)).latest("id")
    assert event.tenant_id is None
    assert operator_client.get(f"/console/changes/{event.pk}/").status_code == 404
    assert "platform_wide_tool" not in _body(operator_client.get("/console/changes/"))
    assert "platform_wide_tool" not in _body(operator_client.get("/console/changes/export.json"))
    assert superuser_client.get(f"/console/changes/{event.pk}/").status_code == 200
    exported = json.loads(_body(superuser_client.get("/console/changes/export.json")))
    assert any(row["object_repr"] == "platform_wide_tool" for row in exported)


def test_an_operator_of_two_tenants_sees_both(make_user, acme, globex, two_tenant_rows):
    from django.test import Client

    from tenants.services import membership_set

    user = make_user("both-op", acme)
    membership_set(tenant=globex, user=user, role="owner")
    client = Client()
    client.force_login(user)
    body = _body(client.get("/console/invocations/"))
    assert "acme_tool" in body and "globex_tool" in body
    assert client.get(f"/console/invocations/{two_tenant_rows['globex'].pk}/").status_code == 200
