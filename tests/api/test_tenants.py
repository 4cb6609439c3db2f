"""/api/v1/tenants/: platform admins manage tenants; members read their own."""

from __future__ import annotations

import pytest

from tenants.models import Tenant
from tests.api.roles import ROLES
from tools_app.catalog.models import AccessRule, Tool

pytestmark = pytest.mark.django_db


def slugs(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [row["slug"] for row in response.json()["results"]]


def test_superuser_lists_every_tenant(acme, globex, superuser, client_for) -> None:
    assert slugs(client_for(superuser).get("/api/v1/tenants/")) == ["acme", "globex"]


@pytest.mark.parametrize("role", ROLES)
def test_members_see_only_their_tenants(role, globex, as_role) -> None:
    client = as_role(role)
    assert slugs(client.get("/api/v1/tenants/")) == ["acme"]
    assert client.get("/api/v1/tenants/acme/").json()["endpoint"] == "/mcp/acme"
    assert client.get("/api/v1/tenants/globex/").status_code == 404


def test_other_tenants_look_missing(acme, globex_admin, client_for) -> None:
    client = client_for(globex_admin)
    for method in ("get", "patch", "delete"):
        assert getattr(client, method)("/api/v1/tenants/acme/").status_code == 404
        assert getattr(client, method)("/api/v1/tenants/nope/").status_code == 404


def test_inactive_tenant_is_closed_to_its_members(acme, as_role) -> None:
    Tenant.objects.filter(pk=acme.pk).update(is_active=False)
    assert slugs(as_role("owner").get("/api/v1/tenants/")) == []
    assert as_role("owner").get("/api/v1/tools/").json()["results"] == []


def test_superuser_creates_updates_and_deletes(superuser, client_for) -> None:
    client = client_for(superuser)
    created = client.post(
        "/api/v1/tenants/", {"slug": "initech", "name": "Initech", "calls_per_minute": 60}, format="json"
    )
    assert created.status_code == 201, created.content
    assert created.json()["calls_per_minute"] == 60 and created.json()["is_active"] is True

    updated = client.patch("/api/v1/tenants/initech/", {"is_active": False, "name": "Initech Ltd"}, format="json")
    assert updated.status_code == 200
    tenant = Tenant.objects.get(slug="initech")
    assert (tenant.is_active, tenant.name) == (False, "Initech Ltd")

    assert client.delete("/api/v1/tenants/initech/").status_code == 204
    assert not Tenant.objects.filter(slug="initech").exists()


def test_deleting_a_tenant_deletes_what_it_owns(acme, superuser, client_for, make_tool, make_key, grant) -> None:
    tool = make_tool("lookup", tenant=acme)
    key, _ = make_key(acme)
    grant(acme, tool, owner=acme, keys=[key])
    grant(acme, "demo.*")
    assert client_for(superuser).delete("/api/v1/tenants/acme/").status_code == 204
    assert not Tool.objects.exists() and not AccessRule.objects.exists()


@pytest.mark.parametrize("role", ROLES)
def test_members_cannot_change_tenants(role, as_role) -> None:
    client = as_role(role)
    assert client.post("/api/v1/tenants/", {"slug": "mine", "name": "Mine"}, format="json").status_code == 403
    assert client.patch("/api/v1/tenants/acme/", {"allow_anonymous": True}, format="json").status_code == 403
    assert client.delete("/api/v1/tenants/acme/").status_code == 403
    assert Tenant.objects.get(slug="acme").allow_anonymous is False


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"slug": "has space", "name": "x"}, "slug", "letters, numbers, underscores or hyphens"),
        ({"slug": "acme", "name": "x"}, "slug", "already exists"),
        ({"slug": "new"}, "name", "required"),
        ({"slug": "new", "name": "x", "calls_per_minute": -1}, "calls_per_minute", "greater than or equal to 0"),
    ],
)
def test_validation_errors_name_the_field(acme, superuser, client_for, data, field, message) -> None:
    response = client_for(superuser).post("/api/v1/tenants/", data, format="json")
    assert response.status_code == 400
    assert list(response.json()) == [field]
    assert message in response.json()[field][0]


def test_nul_characters_are_refused_not_looked_up(acme, superuser, client_for) -> None:
    # PostgreSQL refuses NUL even in a lookup: these must not reach the database.
    client = client_for(superuser)
    assert client.get("/api/v1/tenants/ac%00me/").status_code == 404
    response = client.post("/api/v1/api-keys/", {"tenant": "ac\x00me", "name": "k"}, format="json")
    assert response.status_code == 400 and list(response.json()) == ["tenant"]
    response = client.post(
        "/api/v1/memberships/", {"tenant": "acme", "user": "ro\x00ot", "role": "viewer"}, format="json"
    )
    assert response.status_code == 400 and list(response.json()) == ["user"]
