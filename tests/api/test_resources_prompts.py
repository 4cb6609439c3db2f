"""/api/v1/resources/, /api/v1/resource-templates/ and /api/v1/prompts/: CRUD with the model's
checks, tenant scoping (another tenant's entries answer 404), roles, and access rules by kind."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from audit.models import AuditEvent
from conformance.handlers.fixtures import PNG_1PX
from tests.api.pages import ids
from tests.api.roles import ROLES
from tools_app.catalog.models import AccessRule, Prompt, Resource, ResourceTemplate

pytestmark = pytest.mark.django_db

GREETING = [{"role": "user", "content": {"type": "text", "text": "Hello {{who}}."}}]


@pytest.fixture
def entries(acme, globex) -> dict[str, Any]:
    def prompt(tenant: Any) -> Prompt:
        return Prompt.objects.create(
            tenant=tenant, name="greet", description="Greets.", arguments=[{"name": "who"}], messages=GREETING
        )

    return {
        "platform": Resource.objects.create(uri="docs://shared", name="shared", text="for all"),
        "acme": Resource.objects.create(tenant=acme, uri="docs://acme", name="acme", text="acme's"),
        "globex": Resource.objects.create(tenant=globex, uri="docs://globex", name="globex", text="globex's"),
        "acme_prompt": prompt(acme),
        "globex_prompt": prompt(globex),
        "globex_template": ResourceTemplate.objects.create(
            tenant=globex,
            name="items",
            uri_template="docs://items/{id}",
            backend_config={"handler": "conformance.template_data"},
        ),
    }


@pytest.mark.parametrize("role", ROLES)
def test_members_see_their_tenants_entries_only(role, as_role, entries) -> None:
    client = as_role(role)
    assert ids(client.get("/api/v1/resources/")) == [entries["acme"].pk]
    assert ids(client.get("/api/v1/prompts/")) == [entries["acme_prompt"].pk]
    assert ids(client.get("/api/v1/resource-templates/")) == []
    for path in (
        f"/api/v1/resources/{entries['platform'].pk}/",
        f"/api/v1/resources/{entries['globex'].pk}/",
        f"/api/v1/prompts/{entries['globex_prompt'].pk}/",
        f"/api/v1/resource-templates/{entries['globex_template'].pk}/",
    ):
        assert client.get(path).status_code == 404


def test_another_tenants_entries_cannot_be_changed_or_deleted(globex_admin, client_for, entries) -> None:
    client = client_for(globex_admin)
    resource, prompt = entries["acme"], entries["acme_prompt"]
    assert client.patch(f"/api/v1/resources/{resource.pk}/", {"text": "mine"}, format="json").status_code == 404
    assert client.delete(f"/api/v1/prompts/{prompt.pk}/").status_code == 404
    resource.refresh_from_db()
    assert resource.text == "acme's" and Prompt.objects.filter(pk=prompt.pk).exists()


def test_superuser_sees_every_resource_and_filters(superuser, client_for, entries) -> None:
    client = client_for(superuser)
    assert ids(client.get("/api/v1/resources/")) == sorted(entries[k].pk for k in ("acme", "globex", "platform"))
    assert ids(client.get("/api/v1/resources/?uri=docs://globex")) == [entries["globex"].pk]
    assert ids(client.get("/api/v1/prompts/?tenant=globex")) == [entries["globex_prompt"].pk]


@pytest.mark.parametrize(("role", "status"), [("owner", 201), ("admin", 201), ("operator", 403), ("viewer", 403)])
def test_who_creates_resources(role, status, as_role) -> None:
    body = {"tenant": "acme", "uri": "docs://new", "name": "new", "text": "hello", "tags": ["docs"]}
    response = as_role(role).post("/api/v1/resources/", body, format="json")
    assert response.status_code == status, response.content
    assert Resource.objects.filter(uri="docs://new").exists() == (status == 201)


def test_binary_resource_round_trips_as_base64_and_is_audited(as_role) -> None:
    body = {"tenant": "acme", "uri": "docs://logo", "name": "logo", "mime_type": "image/png", "blob": PNG_1PX}
    response = as_role("admin").post("/api/v1/resources/", body, format="json")
    assert response.status_code == 201, response.content
    data = response.json()
    assert data["blob"] == PNG_1PX and data["size"] == len(base64.b64decode(PNG_1PX))
    assert data["mcp"] == {
        "uri": "docs://logo",
        "name": "logo",
        "mimeType": "image/png",
        "size": data["size"],
        "annotations": {"lastModified": data["mcp"]["annotations"]["lastModified"]},
    }
    event = AuditEvent.objects.get(object_type="tools_app.Resource", action="created")
    assert event.source == "api" and event.tenant_slug == "acme"
    bad = as_role("admin").post(
        "/api/v1/resources/", {**body, "uri": "docs://bad", "blob": "not base64!"}, format="json"
    )
    assert bad.status_code == 400 and "blob" in bad.json()


def test_invalid_entries_answer_400_naming_the_field(as_role, entries, settings) -> None:
    client = as_role("admin")
    taken = client.post("/api/v1/resources/", {"tenant": "acme", "uri": "docs://acme", "name": "x"}, format="json")
    assert taken.status_code == 400 and "already exists" in taken.json()["uri"][0]
    no_scheme = client.post("/api/v1/resources/", {"tenant": "acme", "uri": "no scheme", "name": "x"}, format="json")
    assert "uri" in no_scheme.json()
    settings.TOOLBAY_RESOURCE_MAX_BYTES = 4
    too_big = client.post(
        "/api/v1/resources/", {"tenant": "acme", "uri": "docs://big", "name": "b", "text": "12345"}, format="json"
    )
    assert "TOOLBAY_RESOURCE_MAX_BYTES" in too_big.json()["text"][0]
    bad_template = client.post(
        "/api/v1/resource-templates/",
        {
            "tenant": "acme",
            "name": "t",
            "uri_template": "docs://{a*}",
            "backend_config": {"handler": "conformance.template_data"},
        },
        format="json",
    )
    assert "uri_template" in bad_template.json()
    unknown_handler = client.post(
        "/api/v1/resource-templates/",
        {"tenant": "acme", "name": "t", "uri_template": "docs://{a}", "backend_config": {"handler": "nope"}},
        format="json",
    )
    assert "no resource handler named 'nope'" in unknown_handler.json()["backend_config"][0]
    undeclared = client.post(
        "/api/v1/prompts/",
        {"tenant": "acme", "name": "p", "description": "d", "messages": GREETING},
        format="json",
    )
    assert "undeclared arguments ['who']" in undeclared.json()["messages"][0]
    partial = client.post(
        "/api/v1/prompts/",
        {
            "tenant": "acme",
            "name": "p",
            "description": "d",
            "messages": [{"role": "user", "content": {"type": "text", "text": "{{> /etc/passwd}}"}}],
        },
        format="json",
    )
    assert "partials" in partial.json()["messages"][0]


def test_prompt_changes_move_its_version_and_its_mcp_entry(as_role, entries) -> None:
    prompt = entries["acme_prompt"]
    response = as_role("admin").patch(f"/api/v1/prompts/{prompt.pk}/", {"title": "Greeter"}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["version"] == 2
    assert response.json()["mcp"] == {
        "name": "greet", "title": "Greeter", "description": "Greets.", "arguments": [{"name": "who"}],
    }  # fmt: skip
    moved = as_role("admin").patch(f"/api/v1/prompts/{prompt.pk}/", {"tenant": "globex"}, format="json")
    assert moved.status_code == 400


def test_access_rules_name_their_kind(as_role, acme) -> None:
    client = as_role("admin")
    response = client.post(
        "/api/v1/access-rules/", {"tenant": "acme", "kind": "prompt", "tool_pattern": "greet*"}, format="json"
    )
    assert response.status_code == 201, response.content
    assert response.json()["kind"] == "prompt"
    assert AccessRule.objects.get(pk=response.json()["id"]).owner == acme
    assert ids(client.get("/api/v1/access-rules/?kind=prompt")) == [response.json()["id"]]
    assert ids(client.get("/api/v1/access-rules/?kind=tool")) == []
    bad = client.post("/api/v1/access-rules/", {"tenant": "acme", "kind": "nope", "tool_pattern": "x"}, format="json")
    assert bad.status_code == 400 and "kind" in bad.json()
