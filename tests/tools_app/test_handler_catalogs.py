"""Handlers are offered per catalog: the registry's rule, and the admin as a tenant admin
(the select offers only what the tenant may bind; a posted name it may not is refused)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from tests.tools_app.admin_forms import tool_data
from tools_app.backends.python.checks import check_handler_bindings
from tools_app.backends.python.registry import EVERY_CATALOG, Registration, names_of, register
from tools_app.catalog.models import Tool


def test_registration_offers() -> None:
    def fn() -> None: ...

    platform_only = Registration("a", fn, frozenset())
    acme_only = Registration("b", fn, frozenset({"acme"}))
    everyone = Registration("c", fn, None)
    assert [r.offered_to(None) for r in (platform_only, acme_only, everyone)] == [True, True, True]
    assert [r.offered_to("acme") for r in (platform_only, acme_only, everyone)] == [False, True, True]
    assert [r.offered_to("globex") for r in (platform_only, acme_only, everyone)] == [False, False, True]


def test_one_slug_as_a_string_is_refused() -> None:
    with pytest.raises(TypeError, match="list of tenant slugs"):
        register("tool", "tests.one_slug", lambda ctx, arguments: "", catalogs="acme")
    assert "tests.one_slug" not in names_of("tool")


def test_names_per_catalog() -> None:
    every = names_of("tool")
    acme = names_of("tool", ["acme"])
    assert "conformance.trigger_tool_change" in every and "conformance.trigger_tool_change" not in acme
    assert "testing.acme_only" in acme and "testing.acme_only" not in names_of("tool", ["globex"])
    assert set(names_of("tool", ["acme", None])) == set(every)
    assert EVERY_CATALOG == "*"


def handler_choices(client: Client) -> list[str]:
    form = client.get(reverse("admin:tools_app_tool_add")).context["adminform"].form
    return [value for value, _ in form.fields["handler"].choices if value]


def test_a_tenant_admin_is_offered_only_their_catalogs_handlers(acme_admin_client: Client) -> None:
    offered = handler_choices(acme_admin_client)
    assert offered == names_of("tool", ["acme"])
    assert "demo.echo" in offered and "testing.acme_only" in offered
    assert "conformance.trigger_tool_change" not in offered and "testing.crash" not in offered


def test_platform_admins_are_offered_every_handler(admin_client: Client) -> None:
    assert handler_choices(admin_client) == names_of("tool")


@pytest.mark.parametrize("handler", ["conformance.trigger_tool_change", "no.such.handler"])
def test_a_tenant_admin_posting_a_platform_only_handler_is_refused(
    acme_admin_client: Client, acme: Any, handler: str
) -> None:
    response = acme_admin_client.post(
        reverse("admin:tools_app_tool_add"), tool_data(tenant=acme.pk, name="bound", handler=handler)
    )
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    # The same answer for a handler that exists elsewhere as for one that does not.
    assert errors["handler"] == [f"Select a valid choice. {handler} is not one of the available choices."]
    assert not Tool.objects.exists()


def test_a_tenant_admin_binds_a_handler_offered_to_their_tenant(acme_admin_client: Client, acme: Any) -> None:
    response = acme_admin_client.post(
        reverse("admin:tools_app_tool_add"), tool_data(tenant=acme.pk, name="bound", handler="testing.acme_only")
    )
    assert response.status_code == 302
    assert Tool.objects.get(name="bound").backend_config == {"handler": "testing.acme_only"}


def test_the_platform_admin_binds_a_platform_only_handler(admin_client: Client) -> None:
    response = admin_client.post(
        reverse("admin:tools_app_tool_add"), tool_data(name="bound", handler="conformance.trigger_tool_change")
    )
    assert response.status_code == 302
    assert Tool.objects.get(name="bound").tenant is None


def test_bindings_made_before_are_reported(acme: Any) -> None:
    # Straight into the database, as tenants could bind any handler before.
    Tool.objects.create(tenant=acme, name="old", description="d", backend_config={"handler": "testing.crash"})
    Tool.objects.create(tenant=acme, name="fine", description="d", backend_config={"handler": "testing.acme_only"})
    Tool.objects.create(name="platform", description="d", backend_config={"handler": "testing.crash"})
    (warning,) = check_handler_bindings(databases=["default"])
    assert warning.id == "tools_app.W001"
    assert warning.msg.endswith("tool 'old' (acme): testing.crash")
    assert check_handler_bindings() == []  # only when the checks may read the database
