"""The admin screens of tenants, memberships and API keys, seen by a platform admin (a
superuser) and by a tenant admin of acme who must never see globex."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from tenants.models import ApiKey, Membership, Tenant
from tenants.services import membership_set
from tests.credentials import authenticate


def url(name: str, *args: Any) -> str:
    return reverse(f"admin:tenants_{name}", args=args)


def listed(response: Any) -> set[Any]:
    assert response.status_code == 200
    return set(response.context["cl"].result_list)


@pytest.fixture
def keys(acme, globex, make_key) -> dict[str, ApiKey]:
    return {"acme": make_key(acme, "acme-key")[0], "globex": make_key(globex, "globex-key")[0]}


@pytest.fixture
def memberships(acme, globex, make_staff) -> dict[str, Membership]:
    return {
        "acme": Membership.objects.get(user=make_staff("acme-member", acme, role="viewer")),
        "globex": Membership.objects.get(user=make_staff("globex-member", globex, role="owner")),
    }


# --- who gets in at all -------------------------------------------------------------


def test_staff_without_membership_sees_nothing(make_staff, keys) -> None:
    client = Client()
    client.force_login(make_staff("drifter"))
    assert client.get(reverse("admin:index")).context["app_list"] == []
    assert client.get(url("apikey_changelist")).status_code == 403
    assert client.get(url("apikey_change", keys["acme"].pk)).status_code == 404


def test_viewer_membership_is_not_enough(acme, make_staff, keys) -> None:
    client = Client()
    client.force_login(make_staff("viewer", acme, role=Membership.Role.VIEWER))
    assert client.get(url("apikey_changelist")).status_code == 403


def test_django_permission_rows_do_not_widen_a_tenant_admins_view(acme, make_staff, keys) -> None:
    from django.contrib.auth.models import Permission

    user = make_staff("permitted", acme)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="tenants"))
    client = Client()
    client.force_login(user)
    assert listed(client.get(url("apikey_changelist"))) == {keys["acme"]}


def test_tenant_admin_index_lists_the_apps(acme_admin_client: Client) -> None:
    apps = {app["app_label"] for app in acme_admin_client.get(reverse("admin:index")).context["app_list"]}
    assert apps == {"tenants", "tools_app", "audit", "oauth"}  # audit: read-only, their tenants only


# --- changelists --------------------------------------------------------------------


def test_superuser_sees_everything(admin_client: Client, keys, memberships, acme, globex) -> None:
    assert listed(admin_client.get(url("apikey_changelist"))) == set(keys.values())
    assert set(memberships.values()) <= listed(admin_client.get(url("membership_changelist")))
    assert listed(admin_client.get(url("tenant_changelist"))) == {acme, globex}


def test_tenant_admin_lists_only_their_tenants_objects(acme_admin_client: Client, keys, memberships, acme) -> None:
    assert listed(acme_admin_client.get(url("apikey_changelist"))) == {keys["acme"]}
    shown = listed(acme_admin_client.get(url("membership_changelist")))
    assert memberships["acme"] in shown and memberships["globex"] not in shown
    assert {m.tenant for m in shown} == {acme}
    assert listed(acme_admin_client.get(url("tenant_changelist"))) == {acme}


def test_tenant_admin_search_and_filters_stay_inside(acme_admin_client: Client, keys, globex) -> None:
    assert listed(acme_admin_client.get(url("apikey_changelist"), {"q": "globex"})) == set()
    filtered = acme_admin_client.get(url("apikey_changelist"), {"tenant__id__exact": globex.pk})
    assert keys["globex"] not in listed(filtered)
    response = acme_admin_client.get(url("apikey_changelist"))
    assert b"globex" not in response.content


# --- other tenants' objects by URL: 404 ---------------------------------------------


@pytest.mark.parametrize("view", ["change", "delete", "history"])
def test_tenant_admin_gets_404_for_other_tenants_objects(
    acme_admin_client: Client, keys, memberships, globex, view: str
) -> None:
    for model, pk in (("apikey", keys["globex"].pk), ("membership", memberships["globex"].pk), ("tenant", globex.pk)):
        response = acme_admin_client.get(url(f"{model}_{view}", pk))
        assert response.status_code == 404, (model, view)


def test_posting_to_other_tenants_object_is_404_and_changes_nothing(acme_admin_client: Client, keys) -> None:
    response = acme_admin_client.post(url("apikey_change", keys["globex"].pk), {"name": "mine now", "scopes": ""})
    assert response.status_code == 404
    assert ApiKey.objects.get(pk=keys["globex"].pk).name == "globex-key"
    response = acme_admin_client.post(url("apikey_delete", keys["globex"].pk), {"post": "yes"})
    assert response.status_code == 404
    assert ApiKey.objects.filter(pk=keys["globex"].pk).exists()


def test_missing_objects_are_404_for_superusers_too(admin_client: Client) -> None:
    assert admin_client.get(url("apikey_change", 999999)).status_code == 404
    assert admin_client.get(url("apikey_change", "not-a-number")).status_code == 404


def test_bulk_actions_cannot_reach_other_tenants(acme_admin_client: Client, keys) -> None:
    response = acme_admin_client.post(
        url("apikey_changelist"),
        {"action": "revoke_keys", "_selected_action": [keys["globex"].pk, keys["acme"].pk]},
    )
    assert response.status_code == 302
    assert ApiKey.objects.get(pk=keys["globex"].pk).revoked_at is None
    assert ApiKey.objects.get(pk=keys["acme"].pk).revoked_at is not None


# --- tenants --------------------------------------------------------------------------


def test_tenant_admin_views_own_tenant_read_only(acme_admin_client: Client, acme) -> None:
    response = acme_admin_client.get(url("tenant_change", acme.pk))
    assert response.status_code == 200
    assert response.context["has_change_permission"] is False
    assert b"/mcp/acme" in response.content
    response = acme_admin_client.post(
        url("tenant_change", acme.pk), {"slug": "acme", "name": "Hacked", "is_active": "on"}
    )
    assert response.status_code == 403
    assert Tenant.objects.get(pk=acme.pk).name == "Acme Corp"
    assert acme_admin_client.get(url("tenant_add")).status_code == 403


def test_superuser_creates_a_tenant(admin_client: Client) -> None:
    data = {"slug": "initech", "name": "Initech", "is_active": "on", "tool_listing": "search"}
    response = admin_client.post(url("tenant_add"), data)
    assert response.status_code == 302
    assert Tenant.objects.get(slug="initech").tool_listing == "search"


# --- API keys -----------------------------------------------------------------------


def test_adding_a_key_shows_the_raw_key_once(acme_admin_client: Client, acme) -> None:
    response = acme_admin_client.post(url("apikey_add"), {"tenant": acme.pk, "name": "ci", "scopes": "tools:read, x"})
    assert response.status_code == 200
    raw = response.context["raw_key"]
    assert raw.startswith("tbk_")
    assert raw.encode() in response.content
    assert "no-store" in response["Cache-Control"]

    key = ApiKey.objects.get(tenant=acme, name="ci")
    assert (key.scopes, key.created_by.username) == (["tools:read", "x"], "acme-admin")
    assert raw not in {key.key_hash, key.prefix}
    assert authenticate(acme, raw) is not None

    # Never again: not on the change page, not in the list, not in the next response.
    for page in (url("apikey_change", key.pk), url("apikey_changelist"), reverse("admin:index")):
        assert raw.encode() not in acme_admin_client.get(page).content
    assert key.prefix.encode() in acme_admin_client.get(url("apikey_change", key.pk)).content


def test_superuser_adds_a_key_for_any_tenant(admin_client: Client, globex) -> None:
    expires = timezone.now() + timedelta(days=30)
    response = admin_client.post(
        url("apikey_add"),
        {
            "tenant": globex.pk,
            "name": "ops",
            "scopes": "",
            "expires_at_0": expires.date().isoformat(),
            "expires_at_1": "12:00:00",
        },
    )
    assert response.status_code == 200
    key = ApiKey.objects.get(name="ops")
    assert key.tenant == globex and key.expires_at is not None
    assert authenticate(globex, response.context["raw_key"]) is not None


def test_tenant_admin_cannot_add_a_key_to_another_tenant(acme_admin_client: Client, globex) -> None:
    response = acme_admin_client.post(url("apikey_add"), {"tenant": globex.pk, "name": "sneaky"})
    assert response.status_code == 200
    assert "tenant" in response.context["adminform"].form.errors
    assert not ApiKey.objects.filter(name="sneaky").exists()


def test_tenant_choices_are_limited(acme_admin_client: Client, acme) -> None:
    form = acme_admin_client.get(url("apikey_add")).context["adminform"].form
    assert list(form.fields["tenant"].queryset) == [acme]
    assert form.initial["tenant"] == str(acme.pk)


def test_tenant_autocomplete_is_limited(acme_admin_client: Client, acme, globex) -> None:
    response = acme_admin_client.get(
        reverse("admin:autocomplete"),
        {"app_label": "tenants", "model_name": "apikey", "field_name": "tenant", "term": ""},
    )
    assert response.status_code == 200
    assert [r["text"] for r in response.json()["results"]] == ["acme"]


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"scopes": "ok bad/scope"}, "scopes", "not a valid scope"),
        ({"expires_at_0": "2001-01-01", "expires_at_1": "00:00:00"}, "expires_at", "must be in the future"),
        ({"name": "taken"}, None, "already exists"),
    ],
)
def test_add_key_form_errors(acme_admin_client: Client, acme, make_key, data, field, message) -> None:
    make_key(acme, "taken")
    response = acme_admin_client.post(url("apikey_add"), {"tenant": acme.pk, "name": "new", **data})
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert message in " ".join(errors[field] if field else errors.get("__all__", []))
    assert ApiKey.objects.filter(tenant=acme).count() == 1


def test_key_material_is_read_only(acme_admin_client: Client, keys) -> None:
    key = keys["acme"]
    response = acme_admin_client.post(
        url("apikey_change", key.pk),
        {"name": "renamed", "scopes": "tools:read", "prefix": "x" * 12, "key_hash": "0" * 64, "tenant": key.tenant_id},
    )
    assert response.status_code == 302
    stored = ApiKey.objects.get(pk=key.pk)
    assert (stored.name, stored.scopes) == ("renamed", ["tools:read"])
    assert (stored.prefix, stored.key_hash) == (key.prefix, key.key_hash)


def test_revoke_action(admin_client: Client, acme, make_key) -> None:
    key, raw = make_key(acme, "old")
    response = admin_client.post(
        url("apikey_changelist"), {"action": "revoke_keys", "_selected_action": [key.pk]}, follow=True
    )
    assert "Revoked 1 API key(s)." in [str(m) for m in response.context["messages"]]
    assert ApiKey.objects.get(pk=key.pk).revoked_at is not None
    assert authenticate(acme, raw) is None


# --- memberships --------------------------------------------------------------------


def test_tenant_admin_adds_a_member_by_username(acme_admin_client: Client, acme) -> None:
    get_user_model().objects.create_user("newbie")
    response = acme_admin_client.post(url("membership_add"), {"user": "newbie", "tenant": acme.pk, "role": "operator"})
    assert response.status_code == 302
    assert Membership.objects.get(user__username="newbie").tenant == acme


def test_unknown_username_is_a_form_error(acme_admin_client: Client, acme) -> None:
    response = acme_admin_client.post(url("membership_add"), {"user": "ghost", "tenant": acme.pk, "role": "viewer"})
    assert response.context["adminform"].form.errors["user"] == ["There is no user with this username."]


def test_tenant_admin_cannot_add_members_to_other_tenants(acme_admin_client: Client, globex) -> None:
    get_user_model().objects.create_user("newbie")
    response = acme_admin_client.post(url("membership_add"), {"user": "newbie", "tenant": globex.pk, "role": "viewer"})
    assert "tenant" in response.context["adminform"].form.errors
    assert not Membership.objects.filter(tenant=globex, user__username="newbie").exists()


def test_only_owners_hand_out_the_owner_role(acme_admin_client: Client, acme, make_staff) -> None:
    get_user_model().objects.create_user("newbie")
    response = acme_admin_client.post(url("membership_add"), {"user": "newbie", "tenant": acme.pk, "role": "owner"})
    assert "Only an owner" in response.context["adminform"].form.errors["role"][0]

    owner = make_staff("acme-owner", acme, role=Membership.Role.OWNER)
    owners_membership = Membership.objects.get(user=owner)
    # An admin may look at an owner's membership but not change or delete it.
    page = acme_admin_client.get(url("membership_change", owners_membership.pk))
    assert page.context["has_change_permission"] is False
    assert acme_admin_client.post(url("membership_change", owners_membership.pk), {"role": "viewer"}).status_code == 403
    assert acme_admin_client.post(url("membership_delete", owners_membership.pk), {"post": "yes"}).status_code == 403

    owner_client = Client()
    owner_client.force_login(owner)
    response = owner_client.post(url("membership_add"), {"user": "newbie", "tenant": acme.pk, "role": "owner"})
    assert response.status_code == 302


def test_membership_change_edits_the_role_only(acme_admin_client: Client, acme, globex, make_staff) -> None:
    member = make_staff("member", acme, role=Membership.Role.VIEWER)
    membership = Membership.objects.get(user=member)
    response = acme_admin_client.post(
        url("membership_change", membership.pk), {"role": "operator", "tenant": globex.pk, "user": "acme-admin"}
    )
    assert response.status_code == 302
    membership.refresh_from_db()
    assert (membership.role, membership.tenant, membership.user) == ("operator", acme, member)


def test_tenant_admin_of_two_tenants_sees_both(acme, globex, make_staff, keys) -> None:
    user = make_staff("both", acme)
    membership_set(tenant=globex, user=user, role=Membership.Role.OWNER)
    client = Client()
    client.force_login(user)
    assert listed(client.get(url("apikey_changelist"))) == set(keys.values())
    assert "tenant" not in client.get(url("apikey_add")).context["adminform"].form.initial
