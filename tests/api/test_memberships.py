"""/api/v1/memberships/: admins and owners manage who is in their tenant; owners make owners."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from tenants.models import Membership
from tests.api.roles import ROLES

pytestmark = pytest.mark.django_db


@pytest.fixture
def newcomer(db):
    return get_user_model().objects.create_user("newcomer")


def membership(members, role: str) -> Membership:
    return Membership.objects.get(user=members[role])


@pytest.mark.parametrize("role", ROLES)
def test_members_list_their_tenants_memberships(role, as_role, globex_admin) -> None:
    rows = as_role(role).get("/api/v1/memberships/").json()["results"]
    assert sorted((row["tenant"], row["user"], row["role"]) for row in rows) == sorted(
        ("acme", f"acme-{r}", r) for r in ROLES
    )


def test_filters(as_role) -> None:
    client = as_role("viewer")
    assert [r["user"] for r in client.get("/api/v1/memberships/?role=owner").json()["results"]] == ["acme-owner"]
    assert [r["role"] for r in client.get("/api/v1/memberships/?user=acme-admin").json()["results"]] == ["admin"]
    assert client.get("/api/v1/memberships/?tenant=globex").json()["results"] == []


def test_other_tenants_memberships_look_missing(members, globex_admin, client_for) -> None:
    client = client_for(globex_admin)
    assert [r["user"] for r in client.get("/api/v1/memberships/").json()["results"]] == ["globex-admin"]
    target = membership(members, "viewer")
    assert client.get(f"/api/v1/memberships/{target.pk}/").status_code == 404
    assert client.patch(f"/api/v1/memberships/{target.pk}/", {"role": "admin"}, format="json").status_code == 404
    assert client.delete(f"/api/v1/memberships/{target.pk}/").status_code == 404
    target.refresh_from_db()
    assert target.role == "viewer"


def test_cannot_add_members_to_another_tenant(globex_admin, client_for, acme, newcomer) -> None:
    response = client_for(globex_admin).post(
        "/api/v1/memberships/", {"tenant": "acme", "user": "newcomer", "role": "viewer"}, format="json"
    )
    assert response.status_code == 400
    assert response.json() == {"tenant": ["There is no tenant with the slug 'acme'."]}


@pytest.mark.parametrize(("role", "status"), [("owner", 201), ("admin", 201), ("operator", 403), ("viewer", 403)])
def test_who_adds_members(role, status, as_role, newcomer) -> None:
    response = as_role(role).post(
        "/api/v1/memberships/", {"tenant": "acme", "user": "newcomer", "role": "operator"}, format="json"
    )
    assert response.status_code == status, response.content
    assert Membership.objects.filter(user=newcomer).exists() == (status == 201)


@pytest.mark.parametrize(("role", "status"), [("owner", 201), ("admin", 403)])
def test_only_owners_make_owners(role, status, as_role, newcomer) -> None:
    response = as_role(role).post(
        "/api/v1/memberships/", {"tenant": "acme", "user": "newcomer", "role": "owner"}, format="json"
    )
    assert response.status_code == status


@pytest.mark.parametrize(("role", "status"), [("owner", 200), ("admin", 200), ("operator", 403), ("viewer", 403)])
def test_who_changes_roles(role, status, as_role, members) -> None:
    target = membership(members, "viewer")
    response = as_role(role).patch(f"/api/v1/memberships/{target.pk}/", {"role": "operator"}, format="json")
    assert response.status_code == status
    target.refresh_from_db()
    assert target.role == ("operator" if status == 200 else "viewer")


def test_admins_cannot_touch_owners(as_role, members, newcomer) -> None:
    admin = as_role("admin")
    owner = membership(members, "owner")
    assert admin.patch(f"/api/v1/memberships/{owner.pk}/", {"role": "viewer"}, format="json").status_code == 403
    assert admin.delete(f"/api/v1/memberships/{owner.pk}/").status_code == 403
    viewer = membership(members, "viewer")
    assert admin.patch(f"/api/v1/memberships/{viewer.pk}/", {"role": "owner"}, format="json").status_code == 403


def test_user_and_tenant_are_fixed(as_role, members) -> None:
    target = membership(members, "viewer")
    response = as_role("owner").put(
        f"/api/v1/memberships/{target.pk}/", {"tenant": "globex", "user": "root", "role": "admin"}, format="json"
    )
    assert response.status_code == 200
    assert (response.json()["tenant"], response.json()["user"], response.json()["role"]) == (
        "acme",
        "acme-viewer",
        "admin",
    )


@pytest.mark.parametrize(("role", "status"), [("owner", 204), ("admin", 204), ("operator", 403), ("viewer", 403)])
def test_who_removes_members(role, status, as_role, members) -> None:
    target = membership(members, "operator")
    assert as_role(role).delete(f"/api/v1/memberships/{target.pk}/").status_code == status
    assert Membership.objects.filter(pk=target.pk).exists() == (status != 204)


def test_the_last_owner_stays(as_role, members, newcomer) -> None:
    owner = as_role("owner")
    own = membership(members, "owner")
    response = owner.patch(f"/api/v1/memberships/{own.pk}/", {"role": "admin"}, format="json")
    assert response.status_code == 400
    assert "last owner" in response.json()["role"][0]
    assert owner.delete(f"/api/v1/memberships/{own.pk}/").status_code == 400

    owner.post("/api/v1/memberships/", {"tenant": "acme", "user": "newcomer", "role": "owner"}, format="json")
    assert owner.delete(f"/api/v1/memberships/{own.pk}/").status_code == 204


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"tenant": "acme", "user": "ghost", "role": "viewer"}, "user", "There is no user with the username 'ghost'"),
        ({"tenant": "acme", "user": "acme-viewer", "role": "viewer"}, "user", "already a member of acme"),
        ({"tenant": "acme", "user": "newcomer", "role": "boss"}, "role", "not a valid choice"),
        ({"tenant": "nowhere", "user": "newcomer", "role": "viewer"}, "tenant", "no tenant with the slug"),
        ({"tenant": "acme", "user": 7, "role": "viewer"}, "user", "Invalid value"),
    ],
)
def test_validation_errors_name_the_field(as_role, newcomer, data, field, message) -> None:
    response = as_role("owner").post("/api/v1/memberships/", data, format="json")
    assert response.status_code == 400
    assert list(response.json()) == [field]
    assert message in response.json()[field][0]
