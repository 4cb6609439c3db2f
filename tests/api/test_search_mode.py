"""Search mode's settings in the REST API: the tenant's tool listing, a key's override, and the
always-visible flag of tools and rules; bad values are refused naming the field."""

from __future__ import annotations

import pytest

from tenants.models import ApiKey, Tenant
from tools_app.catalog.models import AccessRule, Tool

pytestmark = pytest.mark.django_db


def test_a_platform_admin_switches_a_tenant_to_search(acme, superuser, client_for) -> None:
    client = client_for(superuser)
    assert client.get("/api/v1/tenants/acme/").json()["tool_listing"] == "list"
    response = client.patch("/api/v1/tenants/acme/", {"tool_listing": "search"}, format="json")
    assert response.status_code == 200, response.content
    assert Tenant.objects.get(pk=acme.pk).tool_listing == "search"
    response = client.patch("/api/v1/tenants/acme/", {"tool_listing": "grep"}, format="json")
    assert response.status_code == 400 and "tool_listing" in response.json()


def test_a_tenant_owner_sets_a_keys_listing(as_role, acme, make_key) -> None:
    created = as_role("owner").post(
        "/api/v1/api-keys/", {"tenant": "acme", "name": "agent", "tool_listing": "search"}, format="json"
    )
    assert created.status_code == 201, created.content
    assert created.json()["tool_listing"] == "search"
    key = ApiKey.objects.get(pk=created.json()["id"])
    response = as_role("owner").patch(f"/api/v1/api-keys/{key.pk}/", {"tool_listing": ""}, format="json")
    assert response.status_code == 200, response.content
    key.refresh_from_db()
    assert key.tool_listing == ""  # as its tenant says
    response = as_role("owner").patch(f"/api/v1/api-keys/{key.pk}/", {"tool_listing": "all"}, format="json")
    assert response.status_code == 400 and "tool_listing" in response.json()


def test_tools_and_rules_carry_the_always_visible_flag(as_role, acme, make_tool) -> None:
    tool = make_tool("pin_me", tenant=acme)
    response = as_role("admin").patch(f"/api/v1/tools/{tool.pk}/", {"always_visible": True}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["always_visible"] is True and Tool.objects.get(pk=tool.pk).always_visible
    response = as_role("owner").post(
        "/api/v1/access-rules/", {"tenant": "acme", "tool_pattern": "pin_*", "always_visible": True}, format="json"
    )
    assert response.status_code == 201, response.content
    assert AccessRule.objects.get(pk=response.json()["id"]).always_visible
