"""One AuditEvent per change to tenants, memberships, keys, tools and rules: who, from
where, and a field-level diff with secrets redacted. Append-only."""

from __future__ import annotations

import io
import json

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client

from audit.models import AuditEvent
from tenants.models import Membership, Tenant
from tenants.services import api_key_create, api_key_revoke, membership_set
from tests.tools_app.admin_forms import tool_data
from tools_app.catalog.models import AccessRule, Tool

pytestmark = pytest.mark.django_db


def events(object_type: str, object_id: object) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(object_type=object_type, object_id=str(object_id)).order_by("id"))


def test_command_changes_are_attributed_to_the_command():
    call_command("create_tenant", "initech", "--name", "Initech", stdout=io.StringIO())
    tenant = Tenant.objects.get(slug="initech")
    (created,) = events("tenants.Tenant", tenant.pk)
    assert created.action == "created" and created.source == "command"
    assert created.actor_label == "manage.py create_tenant"
    assert created.changes["slug"] == [None, "initech"] and created.tenant_slug == "initech"


def test_api_key_creation_and_revocation_never_show_the_key(acme):
    key, raw = api_key_create(tenant=acme, name="ci")
    api_key_revoke(key=key)
    created, revoked = events("tenants.ApiKey", key.pk)
    assert created.action == "created" and revoked.action == "updated"
    assert created.changes["key_hash"] == [None, "[redacted]"]
    assert revoked.changes["revoked_at"][0] is None and revoked.changes["revoked_at"][1]
    assert set(revoked.changes) == {"revoked_at"}
    dumped = json.dumps([created.changes, revoked.changes])
    assert raw not in dumped and key.key_hash not in dumped
    assert created.tenant == acme and created.source == "system"


def test_admin_tool_edit_records_the_user_and_the_diff(acme, make_tool):
    tool = make_tool("lookup", tenant=acme)
    admin_user = get_user_model().objects.create_superuser("root", password="pw")
    client = Client()
    client.force_login(admin_user)
    data = tool_data(
        tenant=str(acme.pk),
        name="lookup",
        description="Looks things up, better.",
        input_schema=json.dumps(tool.input_schema),
        tags="[]",
        read_only_hint="unknown",
    )
    assert client.post(f"/admin/tools_app/tool/{tool.pk}/change/", data).status_code == 302
    update = events("tools_app.Tool", tool.pk)[-1]
    assert update.action == "updated" and update.source == "admin"
    assert update.actor_user == admin_user and update.actor_label == "root"
    assert update.changes["description"] == ["The lookup tool.", "Looks things up, better."]
    assert update.changes["version"] == [1, 2]
    assert update.tenant == acme


def test_access_rules_memberships_and_deletions(acme, make_tool, grant):
    tool = make_tool("shared")
    rule = grant(acme, tool)
    user = get_user_model().objects.create_user("ops")
    membership = membership_set(tenant=acme, user=user, role=Membership.Role.VIEWER)
    membership_set(tenant=acme, user=user, role=Membership.Role.OPERATOR)
    rule_id = rule.pk
    rule.delete()
    rule_events = events("tools_app.AccessRule", rule_id)
    assert [e.action for e in rule_events] == ["created", "deleted"]
    assert rule_events[-1].changes["effect"] == ["allow", None]
    role_change = events("tenants.Membership", membership.pk)[-1]
    assert role_change.changes == {"role": ["viewer", "operator"]}
    platform_tool = events("tools_app.Tool", tool.pk)[0]
    assert platform_tool.tenant is None  # platform objects belong to no tenant


def test_saving_without_changes_records_nothing(acme, make_tool):
    tool = make_tool("quiet", tenant=acme)
    before = AuditEvent.objects.count()
    AccessRule.objects.filter(pk=-1).delete()
    Tool.objects.get(pk=tool.pk)  # a read
    assert AuditEvent.objects.count() == before


def test_audit_events_are_append_only(acme):
    event = AuditEvent.objects.filter(tenant=acme).first()
    assert event is not None
    event.object_repr = "rewritten"
    with pytest.raises(PermissionError):
        event.save()
    with pytest.raises(PermissionError):
        event.delete()
    assert AuditEvent.objects.get(pk=event.pk).object_repr != "rewritten"


def test_deleting_a_tenant_keeps_its_audit_trail(acme, make_key, make_tool):
    make_key(acme)
    make_tool("private_one", tenant=acme)
    tenant_id = acme.pk
    acme.delete()
    trail = AuditEvent.objects.filter(tenant_id=tenant_id)
    assert {("tenants.Tenant", "deleted"), ("tenants.ApiKey", "deleted"), ("tools_app.Tool", "deleted")} <= {
        (e.object_type, e.action) for e in trail
    }
