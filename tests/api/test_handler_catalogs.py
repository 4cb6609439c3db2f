"""Handlers are offered per catalog: a tenant admin binds through the REST API only the
handlers offered to their tenant, and learns nothing of the others (issue 22, item 8)."""

from __future__ import annotations

from typing import Any

import pytest

from tools_app.catalog.models import ResourceTemplate, Tool

pytestmark = pytest.mark.django_db

SCHEMA = {"type": "object"}
PLATFORM_ONLY = ("conformance.trigger_tool_change", "testing.crash", "testing.acme_only")


def tool_body(handler: str, tenant: str | None = "acme") -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "bound",
        "description": "Bound to a handler.",
        "input_schema": SCHEMA,
        "backend_config": {"handler": handler},
    }
    return body if tenant is None else {**body, "tenant": tenant}


def refusal(response: Any) -> str:
    assert response.status_code == 400, response.content
    (message,) = response.json()["backend_config"]
    return str(message)


def test_a_platform_only_handler_is_refused_like_an_unknown_one(as_role) -> None:
    client = as_role("admin")
    unknown = refusal(client.post("/api/v1/tools/", tool_body("no.such.handler"), format="json"))
    refused = refusal(client.post("/api/v1/tools/", tool_body("conformance.trigger_tool_change"), format="json"))
    assert refused == unknown.replace("no.such.handler", "conformance.trigger_tool_change")
    assert not Tool.objects.exists()


def test_the_refusal_lists_only_what_the_tenant_may_bind(as_role, client_for, globex_admin) -> None:
    acme_message = refusal(as_role("admin").post("/api/v1/tools/", tool_body("nope"), format="json"))
    listed = set(acme_message.split("(registered: ")[1].rstrip(")").split(", "))
    assert {"demo.echo", "conformance.logging", "testing.acme_only"} <= listed
    assert not {"conformance.trigger_tool_change", "conformance.trigger_prompt_change", "testing.crash"} & listed
    globex_message = refusal(
        client_for(globex_admin).post("/api/v1/tools/", tool_body("nope", "globex"), format="json")
    )
    assert "testing.acme_only" not in globex_message and "demo.echo" in globex_message


def test_a_handler_offered_to_one_tenant_binds_there_only(as_role, client_for, globex_admin) -> None:
    created = as_role("admin").post("/api/v1/tools/", tool_body("testing.acme_only"), format="json")
    assert created.status_code == 201, created.content
    refusal(client_for(globex_admin).post("/api/v1/tools/", tool_body("testing.acme_only", "globex"), format="json"))
    assert list(Tool.objects.values_list("tenant__slug", flat=True)) == ["acme"]


def test_a_change_to_a_platform_only_handler_is_refused(as_role, acme, make_tool) -> None:
    tool = make_tool("mine", tenant=acme)
    response = as_role("admin").patch(
        f"/api/v1/tools/{tool.pk}/", {"backend_config": {"handler": "testing.crash"}}, format="json"
    )
    assert "no handler named 'testing.crash' is registered" in refusal(response)
    assert Tool.objects.get(pk=tool.pk).backend_config == {"handler": "demo.echo"}


@pytest.mark.parametrize("handler", PLATFORM_ONLY)
def test_the_platform_catalog_binds_every_handler(superuser, client_for, handler) -> None:
    response = client_for(superuser).post("/api/v1/tools/", tool_body(handler, tenant=None), format="json")
    assert response.status_code == 201, response.content


def test_resource_handlers_are_offered_per_catalog_too(as_role, superuser, client_for) -> None:
    body = {"name": "rows", "uri_template": "rows://{id}", "backend_config": {"handler": "testing.platform_rows"}}
    response = as_role("admin").post("/api/v1/resource-templates/", {**body, "tenant": "acme"}, format="json")
    message = refusal(response)
    assert "no resource handler named 'testing.platform_rows' is registered" in message
    assert "conformance.template_data" in message
    assert not ResourceTemplate.objects.exists()
    assert client_for(superuser).post("/api/v1/resource-templates/", body, format="json").status_code == 201
