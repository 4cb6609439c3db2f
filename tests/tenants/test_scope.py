"""The TenantScope every surface (admin, REST API, console) reads: who is a platform admin,
which role a user holds in which tenant, inactive tenants kept apart, once per request."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser
from django.test import Client, RequestFactory
from django.urls import reverse

from tenants.models import Membership, Tenant
from tenants.scope import TenantScope, tenant_scope
from tenants.services import membership_set, tenant_update

Role = Membership.Role


def _request(user: Any) -> Any:
    request = RequestFactory().get("/")
    request.user = user
    return request


def _scope(user: Any) -> TenantScope:
    return tenant_scope(_request(user))


@pytest.fixture
def member(acme: Tenant, globex: Tenant) -> Any:
    """Not staff: a viewer of acme and an admin of globex."""
    user = get_user_model().objects.create_user("member", password="pw")
    membership_set(tenant=acme, user=user, role=Role.VIEWER)
    membership_set(tenant=globex, user=user, role=Role.ADMIN)
    return user


def test_a_superuser_acts_everywhere_without_memberships(acme: Tenant, globex: Tenant) -> None:
    scope = _scope(get_user_model().objects.create_superuser("root", password="pw"))
    assert scope.platform
    assert scope.has_role(acme.pk, Role.OWNER) and scope.has_role(globex.pk, Role.OWNER)
    assert scope.has_role(None, Role.ADMIN)  # platform objects too
    assert set(Tenant.objects.filter(scope.within("pk"))) == {acme, globex}


def test_roles_are_per_tenant_and_ordered(member: Any, acme: Tenant, globex: Tenant) -> None:
    scope = _scope(member)
    assert not scope.platform and not scope.staff
    assert scope.roles == {acme.pk: Role.VIEWER, globex.pk: Role.ADMIN}
    assert scope.tenant_ids() == {acme.pk, globex.pk}
    assert scope.tenant_ids(Role.OPERATOR) == scope.tenant_ids(Role.ADMIN) == {globex.pk}
    assert scope.tenant_ids(Role.OWNER) == frozenset()
    assert scope.has_role(acme.pk, Role.VIEWER) and not scope.has_role(acme.pk, Role.OPERATOR)
    assert scope.has_role(globex.pk, Role.OPERATOR) and not scope.has_role(globex.pk, Role.OWNER)
    assert not scope.has_role(None, Role.VIEWER)  # platform objects are for platform admins
    assert list(Tenant.objects.filter(scope.within("pk", Role.ADMIN))) == [globex]


def test_a_tenant_without_the_user_is_out_of_scope(member: Any, db: Any) -> None:
    initech = Tenant.objects.create(slug="initech", name="Initech")
    scope = _scope(member)
    assert initech.pk not in scope.tenant_ids()
    assert not scope.has_role(initech.pk, Role.VIEWER)


def test_inactive_tenants_are_left_out_unless_asked_for(member: Any, acme: Tenant, globex: Tenant) -> None:
    tenant_update(tenant=globex, changes={"is_active": False})
    scope = _scope(member)
    assert scope.tenant_ids() == {acme.pk}
    assert not scope.has_role(globex.pk, Role.VIEWER)
    assert list(Tenant.objects.filter(scope.within("pk"))) == [acme]
    # The admin and the console still show a switched-off tenant to its admins and operators.
    assert scope.inactive_roles == {globex.pk: Role.ADMIN}
    assert scope.tenant_ids(Role.ADMIN, include_inactive=True) == {globex.pk}
    assert scope.has_role(globex.pk, Role.ADMIN, include_inactive=True)


def test_staff_is_part_of_the_scope(make_staff: Any, acme: Tenant) -> None:
    scope = _scope(make_staff("alice", acme))
    assert scope.staff and not scope.platform
    assert scope.tenant_ids(Role.ADMIN) == {acme.pk}


@pytest.mark.parametrize("who", ["anonymous", "inactive member", "inactive superuser"])
def test_anonymous_and_inactive_users_have_an_empty_scope(who: str, acme: Tenant) -> None:
    if who == "anonymous":
        user: Any = AnonymousUser()
    else:
        make = get_user_model().objects.create_superuser if "superuser" in who else get_user_model().objects.create_user
        user = make("gone", password="pw", is_active=False, is_staff=True)
        membership_set(tenant=acme, user=user, role=Role.OWNER)
    scope = _scope(user)
    assert scope == TenantScope()
    assert not scope.has_role(acme.pk, Role.VIEWER)
    assert not Tenant.objects.filter(scope.within("pk")).exists()


def test_the_scope_is_read_once_per_request(
    member: Any, acme: Tenant, globex: Tenant, django_assert_num_queries: Any
) -> None:
    request = _request(member)
    with django_assert_num_queries(1):
        first = tenant_scope(request)
    membership_set(tenant=globex, user=member, role=Role.OWNER)
    with django_assert_num_queries(0):
        again = tenant_scope(request)
    assert again is first and again.roles[globex.pk] == Role.ADMIN  # as the request began
    assert _scope(member).roles[globex.pk] == Role.OWNER  # the next request sees the change


# --- one scope, three readings: what each surface shows the same user ---------------------


def test_each_surface_reads_its_own_rule_from_the_one_scope(make_staff: Any, acme: Tenant, globex: Tenant) -> None:
    """alice is staff, an admin of acme and a viewer of globex: the API lets her read both,
    the admin manages acme only (admins and owners), the console shows acme only (operators
    and up). Switching acme off closes it in the API; the admin and the console still show
    it to her."""
    alice = make_staff("alice", acme, role=Role.ADMIN)
    membership_set(tenant=globex, user=alice, role=Role.VIEWER)
    client = Client()
    client.force_login(alice)

    def api() -> set[str]:
        return {tenant["slug"] for tenant in client.get("/api/v1/tenants/").json()["results"]}

    def admin() -> set[str]:
        response = client.get(reverse("admin:tenants_tenant_changelist"))
        return {tenant.slug for tenant in response.context["cl"].result_list}

    def console() -> list[str]:
        """The tenant filter's labels: with one tenant it names that tenant and offers no other."""
        response = client.get("/console/invocations/")
        assert response.status_code == 200
        return [label for _, label in response.context["form"].fields["tenant"].widget.choices]

    assert (api(), admin(), console()) == ({"acme", "globex"}, {"acme"}, ["acme"])
    tenant_update(tenant=acme, changes={"is_active": False})
    assert api() == {"globex"}
    assert client.get(f"/api/v1/tenants/{acme.slug}/").status_code == 404
    assert (admin(), console()) == ({"acme"}, ["acme"])
