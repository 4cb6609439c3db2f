"""What the platform decided holds against a tenant admin (issue 22, defect 8): a rule never
widens when the key it was narrowed to goes, platform rules on a private tool keep the tool
from being deleted, renamed or moved, and scopes on a platform rule are the tenant's choice.

Driven as acme's admin would: through the REST API and the Django admin."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from audit.models import AuditEvent
from tenants.models import ApiKey, Tenant
from tenants.services import membership_set
from tests.credentials import authenticate, principal_of, visible_names
from tools_app.catalog.cache import TenantTools
from tools_app.catalog.models import AccessRule, Tool
from tools_app.catalog.selectors import catalog_snapshot

pytestmark = pytest.mark.django_db


@pytest.fixture
def acme_admin(make_staff, acme) -> Any:
    return make_staff("acme-admin", acme)


@pytest.fixture
def admin_site(acme_admin) -> Client:
    """The Django admin, signed in as acme's admin."""
    client = Client()
    client.force_login(acme_admin)
    return client


@pytest.fixture
def api(acme_admin) -> APIClient:
    """The REST API, signed in as acme's admin."""
    client = APIClient()
    client.force_login(acme_admin)
    return client


def admin_url(name: str, *args: Any) -> str:
    return reverse(f"admin:{name}", args=args)


def sees(tenant: Tenant, key: ApiKey) -> list[str]:
    return visible_names(principal_of(tenant, key))


def rule_audit(rule: AccessRule) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(object_type="tools_app.AccessRule", object_id=str(rule.pk)).order_by("pk"))


# --- a rule never widens when the key that narrowed it goes ----------------------------


def test_deleting_the_only_key_of_a_platform_rule_disables_it(
    admin_site, acme_admin, acme, make_key, make_tool, grant
) -> None:
    chosen, _ = make_key(acme, "chosen")
    other, _ = make_key(acme, "other")
    grant(None, make_tool("payroll"), keys=[chosen])  # a platform rule for one of acme's keys
    rule = AccessRule.objects.get()
    assert sees(acme, chosen) == ["payroll"] and sees(acme, other) == []

    response = admin_site.post(admin_url("tenants_apikey_delete", chosen.pk), {"post": "yes"})
    assert response.status_code == 302
    assert not ApiKey.objects.filter(pk=chosen.pk).exists()

    assert sees(acme, other) == []  # before the fix: the rule applied to every credential
    rule.refresh_from_db()
    assert rule.enabled is False and list(rule.api_keys.all()) == []
    events = rule_audit(rule)
    assert events[-1].action == "updated"
    assert events[-1].changes["enabled"] == [True, False]
    assert events[-1].actor_user == acme_admin and events[-1].source == "admin"


def test_the_bulk_delete_of_every_key_of_a_rule_disables_it(admin_site, acme, make_key, make_tool, grant) -> None:
    first, _ = make_key(acme, "first")
    second, _ = make_key(acme, "second")
    remaining, _ = make_key(acme, "remaining")
    grant(None, make_tool("payroll"), keys=[first, second])
    rule = AccessRule.objects.get()

    response = admin_site.post(
        admin_url("tenants_apikey_changelist"),
        {"action": "delete_selected", "_selected_action": [first.pk, second.pk], "post": "yes"},
    )
    assert response.status_code == 302
    assert list(ApiKey.objects.values_list("name", flat=True)) == ["remaining"]
    assert sees(acme, remaining) == []
    rule.refresh_from_db()
    assert rule.enabled is False


def test_a_rule_keeps_the_keys_that_remain(admin_site, acme, make_key, make_tool, grant) -> None:
    gone, _ = make_key(acme, "gone")
    kept, _ = make_key(acme, "kept")
    other, _ = make_key(acme, "other")
    grant(None, make_tool("payroll"), keys=[gone, kept])
    rule = AccessRule.objects.get()
    admin_site.post(admin_url("tenants_apikey_delete", gone.pk), {"post": "yes"})
    rule.refresh_from_db()
    assert rule.enabled is True and list(rule.api_keys.all()) == [kept]
    assert sees(acme, kept) == ["payroll"] and sees(acme, other) == []


def test_a_rule_still_narrowed_to_an_oauth_group_stays_enabled(admin_site, acme, make_key, make_tool, grant) -> None:
    gone, _ = make_key(acme, "gone")
    other, _ = make_key(acme, "other")
    rule = grant(None, make_tool("payroll"), keys=[gone])
    rule.oauth_groups = ["finance"]
    rule.save()
    admin_site.post(admin_url("tenants_apikey_delete", gone.pk), {"post": "yes"})
    rule.refresh_from_db()
    assert rule.enabled is True
    assert sees(acme, other) == []


def test_a_revoked_key_leaves_the_rule_narrowed(api, acme, make_key, make_tool, grant) -> None:
    chosen, raw = make_key(acme, "chosen")
    other, _ = make_key(acme, "other")
    grant(None, make_tool("payroll"), keys=[chosen])
    assert api.post(f"/api/v1/api-keys/{chosen.pk}/revoke/").status_code == 200
    assert authenticate(acme, raw) is None
    assert AccessRule.objects.get().enabled is True
    assert sees(acme, other) == []


def test_deleting_a_tenant_does_not_hand_its_keys_rules_to_every_tenant(
    admin_client, acme, globex, make_key, make_tool, grant
) -> None:
    acme_key, _ = make_key(acme, "acme key")
    globex_key, _ = make_key(globex, "globex key")
    grant(None, make_tool("payroll"), keys=[acme_key])  # a rule for every tenant, narrowed to acme's key
    rule = AccessRule.objects.get()
    response = admin_client.post(admin_url("tenants_tenant_delete", acme.pk), {"post": "yes"})
    assert response.status_code == 302
    assert sees(globex, globex_key) == []
    rule.refresh_from_db()
    assert rule.enabled is False


def test_the_platform_admin_narrows_and_enables_the_rule_again(
    admin_site, admin_client, acme, make_key, make_tool, grant
) -> None:
    chosen, _ = make_key(acme, "chosen")
    grant(None, make_tool("payroll"), keys=[chosen])
    rule = AccessRule.objects.get()
    admin_site.post(admin_url("tenants_apikey_delete", chosen.pk), {"post": "yes"})
    listing = admin_client.get(admin_url("tools_app_accessrule_changelist"), {"enabled__exact": "0"})
    assert list(listing.context["cl"].result_list) == [rule]

    successor, _ = make_key(acme, "successor")
    data = {
        "effect": "allow", "tool": rule.tool_id, "kind": "tool", "tool_pattern": "", "tenant": "", "owner": "",
        "api_keys": [successor.pk], "oauth_subjects": "", "oauth_groups": "", "scopes": "", "confirmation": "",
        "enabled": "on", "note": "",
    }  # fmt: skip
    response = admin_client.post(admin_url("tools_app_accessrule_change", rule.pk), data)
    assert response.status_code == 302, response.context and response.context["adminform"].form.errors
    assert sees(acme, successor) == ["payroll"]


# --- platform rules keep a private tool from being deleted, renamed or moved ------------


@pytest.fixture
def guarded(acme, make_tool, grant) -> tuple[Tool, AccessRule]:
    """acme's private tool, and a platform rule that makes every call of it ask."""
    tool = make_tool("wire-money", tenant=acme, confirmation="none")
    grant(acme, tool, owner=acme)  # acme's own grant
    rule = grant(acme, tool)  # the platform's rule on it
    rule.confirmation = "always"
    rule.save()
    return tool, rule


def test_the_api_refuses_a_tenant_admin_deleting_a_tool_platform_rules_target(api, guarded) -> None:
    tool, rule = guarded
    response = api.delete(f"/api/v1/tools/{tool.pk}/")
    assert response.status_code == 400
    message = response.json()["non_field_errors"][0]
    assert f"#{rule.pk}" in message and "cannot be deleted" in message
    assert Tool.objects.filter(pk=tool.pk).exists()
    assert AccessRule.objects.filter(pk=rule.pk, confirmation="always").exists()


def test_the_api_refuses_a_tenant_admin_renaming_it(api, guarded) -> None:
    tool, _ = guarded
    dry_run = api.post(f"/api/v1/tools/{tool.pk}/validate/", {"name": "wire-money-old"}, format="json")
    change = api.patch(f"/api/v1/tools/{tool.pk}/", {"name": "wire-money-old"}, format="json")
    for response in (dry_run, change):
        assert response.status_code == 400
        assert "cannot be renamed" in response.json()["name"][0]
    tool.refresh_from_db()
    assert tool.name == "wire-money"
    # Other changes stay the tenant's to make; the rule keeps tightening the tool's policy.
    assert api.patch(f"/api/v1/tools/{tool.pk}/", {"title": "Wire money"}, format="json").status_code == 200


def test_the_admin_refuses_a_tenant_admin_deleting_it(admin_site, guarded) -> None:
    tool, rule = guarded
    page = admin_site.get(admin_url("tools_app_tool_delete", tool.pk))
    assert page.status_code == 200
    content = page.content.decode()
    assert "protected related objects" in content and f"Platform access rule #{rule.pk}" in content
    assert admin_site.post(admin_url("tools_app_tool_delete", tool.pk), {"post": "yes"}).status_code == 200
    bulk = admin_site.post(
        admin_url("tools_app_tool_changelist"),
        {"action": "delete_selected", "_selected_action": [tool.pk], "post": "yes"},
    )
    assert bulk.status_code == 200
    assert Tool.objects.filter(pk=tool.pk).exists()
    assert AccessRule.objects.filter(pk=rule.pk).exists()


def change_in_admin(client: Client, tool: Tool, **fields: Any) -> Any:
    """POST the tool's change form as it stands, with ``fields`` changed."""
    form = client.get(admin_url("tools_app_tool_change", tool.pk)).context["adminform"].form
    data = {name: value for name, value in form.initial.items() if name in form.fields}
    data.update(
        {
            "tenant": tool.tenant_id,
            "input_schema": '{"type": "object"}',
            "output_schema": "",
            "icons": "[]",
            "tags": "[]",
            "backend_config": "{}",
            "handler": "demo.echo",
            "enabled": "on",
            "read_only_hint": "unknown",
            "destructive_hint": "unknown",
            "idempotent_hint": "unknown",
            "open_world_hint": "unknown",
            **fields,
        }
    )
    return client.post(admin_url("tools_app_tool_change", tool.pk), data)


@pytest.mark.parametrize("change", ["rename", "move"])
def test_the_admin_refuses_a_tenant_admin_renaming_or_moving_it(
    admin_site, acme_admin, globex, guarded, change: str
) -> None:
    tool, _ = guarded
    membership_set(tenant=globex, user=acme_admin, role="admin")  # acme's admin runs globex too
    fields = {"name": "wire-money-old"} if change == "rename" else {"tenant": globex.pk}
    response = change_in_admin(admin_site, tool, **fields)
    assert response.status_code == 200
    assert "cannot be renamed or moved" in response.context["adminform"].form.errors["name"][0]
    tool.refresh_from_db()
    assert (tool.name, tool.tenant_id) == ("wire-money", guarded[1].tenant_id)
    # Other changes stay the tenant's to make.
    assert change_in_admin(admin_site, tool, title="Wire money").status_code == 302
    tool.refresh_from_db()
    assert tool.title == "Wire money"


def policy(tenant: Tenant, key: ApiKey, name: str) -> str:
    """The confirmation policy the hot path applies to this key's calls of ``name``."""
    principal = principal_of(tenant, key)
    tools = TenantTools.of(None, catalog_snapshot(tenant.pk)).visible(principal)  # type: ignore[arg-type]
    return tools.confirmation(tools.by_name[name])


def test_deleting_and_recreating_the_tool_cannot_shed_the_platform_policy(api, acme, guarded, make_key) -> None:
    """The issue's path: delete the tool, re-create it under its name with confirmation none."""
    key, _ = make_key(acme)
    assert api.delete(f"/api/v1/tools/{guarded[0].pk}/").status_code == 400
    created = api.post(
        "/api/v1/tools/",
        {
            "tenant": "acme",
            "name": "wire-money",
            "description": "Sends money.",
            "backend_config": {"handler": "demo.echo"},
            "confirmation": "none",
        },
        format="json",
    )
    assert created.status_code == 400  # the name is still the guarded tool's
    assert policy(acme, key, "wire-money") == "always"


def test_a_platform_admin_may_still_delete_it(admin_user, guarded) -> None:
    tool, rule = guarded
    client = APIClient()
    client.force_login(admin_user)
    assert client.delete(f"/api/v1/tools/{tool.pk}/").status_code == 204
    assert not AccessRule.objects.filter(pk=rule.pk).exists()


# --- scopes on a platform rule are the tenant's choice (documented, not a defect) -------


def test_a_platform_rule_narrowed_by_scope_follows_the_scopes_the_tenant_sets(
    api, acme, make_key, make_tool, grant
) -> None:
    key, _ = make_key(acme, "reporting")
    grant(None, make_tool("reports"), scopes=["reports"])
    assert sees(acme, key) == []
    response = api.patch(f"/api/v1/api-keys/{key.pk}/", {"scopes": ["reports"]}, format="json")
    assert response.status_code == 200
    key.refresh_from_db()
    assert sees(acme, key) == ["reports"]
