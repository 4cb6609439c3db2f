"""Audit rows cannot be added, changed or deleted through the admin, not even by a
superuser; other staff see only the tenants they operate."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from audit.models import AuditEvent, Invocation

MODELS = [("invocation", "acme"), ("auditevent", "acme_event")]


def _url(name: str, *args) -> str:
    return reverse(f"admin:audit_{name}", args=args)


@pytest.mark.parametrize(("model", "row"), MODELS)
def test_superuser_can_read_but_never_write(superuser_client, two_tenant_rows, model, row):
    obj = two_tenant_rows[row]
    assert superuser_client.get(_url(f"{model}_changelist")).status_code == 200
    page = superuser_client.get(_url(f"{model}_change", obj.pk))
    assert page.status_code == 200
    body = page.content.decode()
    assert 'name="_save"' not in body and "deletelink" not in body
    assert superuser_client.get(_url(f"{model}_add")).status_code == 403
    assert superuser_client.post(_url(f"{model}_add"), {}).status_code == 403
    assert (
        superuser_client.post(_url(f"{model}_change", obj.pk), {"object_repr": "x", "tool_name": "x"}).status_code
        == 403
    )
    assert superuser_client.get(_url(f"{model}_delete", obj.pk)).status_code == 403
    assert superuser_client.post(_url(f"{model}_delete", obj.pk), {"post": "yes"}).status_code == 403
    # No bulk action either: the changelist offers none and ignores a forged one.
    assert "delete_selected" not in superuser_client.get(_url(f"{model}_changelist")).content.decode()
    superuser_client.post(
        _url(f"{model}_changelist"), {"action": "delete_selected", "_selected_action": [obj.pk], "post": "yes"}
    )
    model_class = Invocation if model == "invocation" else AuditEvent
    assert model_class.objects.filter(pk=obj.pk).exists()
    if model == "auditevent":
        fresh = AuditEvent.objects.get(pk=obj.pk)
        assert fresh.object_repr == obj.object_repr


def test_audit_events_refuse_changes_in_code_too(two_tenant_rows):
    event = two_tenant_rows["acme_event"]
    event.object_repr = "tampered"
    with pytest.raises(PermissionError):
        event.save()
    with pytest.raises(PermissionError):
        event.delete()


def test_staff_operators_see_only_their_tenants_rows(make_staff, acme, two_tenant_rows):
    client = Client()
    client.force_login(make_staff("acme-staff-op", acme, role="operator"))
    listing = client.get(_url("invocation_changelist")).content.decode()
    assert "acme_tool" in listing and "globex_tool" not in listing
    assert client.get(_url("invocation_change", two_tenant_rows["acme"].pk)).status_code == 200
    assert client.get(_url("invocation_change", two_tenant_rows["globex"].pk)).status_code == 404
    assert client.get(_url("auditevent_change", two_tenant_rows["globex_event"].pk)).status_code == 404
    assert client.get(_url("invocation_change", 987654321)).status_code == 404
    assert client.post(_url("invocation_delete", two_tenant_rows["acme"].pk), {"post": "yes"}).status_code == 403


def test_staff_without_an_operator_role_see_no_audit(make_staff, acme, two_tenant_rows):
    client = Client()
    client.force_login(make_staff("acme-viewer", acme, role="viewer"))
    assert client.get(_url("invocation_changelist")).status_code == 403
    assert client.get(_url("auditevent_change", two_tenant_rows["acme_event"].pk)).status_code in (403, 404)
