"""/api/v1/tools/: CRUD with the admin's validation, the dry-run validate action."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.generations import generation
from tests.api.pages import ids
from tests.api.roles import ROLES
from tools_app.catalog.models import AccessRule, Tool
from tools_app.catalog.validation import tool_field_errors

pytestmark = pytest.mark.django_db

ECHO_SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}


def tool_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "tenant": "acme",
        "name": "lookup",
        "description": "Looks things up.",
        "input_schema": ECHO_SCHEMA,
        "backend_config": {"handler": "demo.echo"},
    }
    body.update(overrides)
    return {key: value for key, value in body.items() if value is not ...}


@pytest.fixture
def catalog(acme, globex, make_tool) -> dict[str, Tool]:
    return {
        "platform": make_tool("shared"),
        "acme": make_tool("private", tenant=acme),
        "globex": make_tool("private", tenant=globex),
    }


@pytest.mark.parametrize("role", ROLES)
def test_members_see_their_tenants_private_tools_only(role, as_role, catalog) -> None:
    assert ids(as_role(role).get("/api/v1/tools/")) == [catalog["acme"].pk]
    for other in ("platform", "globex"):
        assert as_role(role).get(f"/api/v1/tools/{catalog[other].pk}/").status_code == 404


def test_superuser_sees_every_tool_and_filters(superuser, client_for, catalog) -> None:
    client = client_for(superuser)
    assert ids(client.get("/api/v1/tools/")) == [t.pk for t in catalog.values()]
    assert ids(client.get("/api/v1/tools/?catalog=platform")) == [catalog["platform"].pk]
    assert ids(client.get("/api/v1/tools/?tenant=globex")) == [catalog["globex"].pk]
    assert ids(client.get("/api/v1/tools/?name=private")) == [catalog["acme"].pk, catalog["globex"].pk]
    Tool.objects.filter(pk=catalog["acme"].pk).update(enabled=False)
    assert ids(client.get("/api/v1/tools/?enabled=false")) == [catalog["acme"].pk]
    assert client.get("/api/v1/tools/?catalog=mine").status_code == 400


def test_other_tenants_tools_look_missing(globex_admin, client_for, catalog) -> None:
    client = client_for(globex_admin)
    tool = catalog["acme"]
    assert ids(client.get("/api/v1/tools/")) == [catalog["globex"].pk]
    assert client.get(f"/api/v1/tools/{tool.pk}/").status_code == 404
    assert client.patch(f"/api/v1/tools/{tool.pk}/", {"enabled": False}, format="json").status_code == 404
    assert client.delete(f"/api/v1/tools/{tool.pk}/").status_code == 404
    assert client.post(f"/api/v1/tools/{tool.pk}/validate/", {}, format="json").status_code == 404
    assert client.post(f"/api/v1/tools/{tool.pk}/test-call/", {}, format="json").status_code == 404
    assert client.get("/api/v1/tools/999999/").status_code == 404
    tool.refresh_from_db()
    assert tool.enabled


@pytest.mark.parametrize(("role", "status"), [("owner", 201), ("admin", 201), ("operator", 403), ("viewer", 403)])
def test_who_creates_tools(role, status, as_role) -> None:
    response = as_role(role).post("/api/v1/tools/", tool_body(), format="json")
    assert response.status_code == status, response.content
    assert Tool.objects.filter(name="lookup").exists() == (status == 201)


def test_created_tool_answers_its_mcp_entry(as_role, acme) -> None:
    body = tool_body(title="Lookup", read_only_hint=True, tags=["search"], output_schema={"type": "object"})
    response = as_role("admin").post("/api/v1/tools/", body, format="json")
    assert response.status_code == 201
    data = response.json()
    assert data["tenant"] == "acme" and data["version"] == 1
    assert data["mcp"] == {
        "name": "lookup",
        "title": "Lookup",
        "description": "Looks things up.",
        "inputSchema": ECHO_SCHEMA,
        "outputSchema": {"type": "object"},
        "annotations": {"readOnlyHint": True},
    }
    assert Tool.objects.get(pk=data["id"]).tenant_id == acme.pk


def test_only_platform_admins_add_platform_tools(as_role, superuser, client_for) -> None:
    response = as_role("owner").post("/api/v1/tools/", tool_body(tenant=...), format="json")
    assert response.status_code == 400
    assert "only platform admins add platform tools" in response.json()["tenant"][0]
    response = as_role("owner").post("/api/v1/tools/", tool_body(tenant=None), format="json")
    assert response.status_code == 400 and list(response.json()) == ["tenant"]

    response = client_for(superuser).post("/api/v1/tools/", tool_body(tenant=...), format="json")
    assert response.status_code == 201 and response.json()["tenant"] is None


@pytest.mark.django_db(transaction=True)  # real commits: the change is published after commit
def test_changes_are_published_like_the_admins(as_role, acme) -> None:
    before = generation("acme")
    created = as_role("admin").post("/api/v1/tools/", tool_body(), format="json").json()
    assert generation("acme") == before + 1
    as_role("admin").patch(f"/api/v1/tools/{created['id']}/", {"enabled": False}, format="json")
    assert generation("acme") == before + 2
    as_role("admin").delete(f"/api/v1/tools/{created['id']}/")
    assert generation("acme") == before + 3


@pytest.mark.parametrize(("role", "status"), [("owner", 200), ("admin", 200), ("operator", 403), ("viewer", 403)])
def test_who_updates_tools(role, status, as_role, catalog) -> None:
    tool = catalog["acme"]
    response = as_role(role).patch(f"/api/v1/tools/{tool.pk}/", {"description": "Better."}, format="json")
    assert response.status_code == status
    tool.refresh_from_db()
    assert tool.description == ("Better." if status == 200 else "The private tool.")
    assert tool.version == (2 if status == 200 else 1)


def test_put_replaces_the_definition(as_role, catalog) -> None:
    tool = catalog["acme"]
    response = as_role("admin").put(
        f"/api/v1/tools/{tool.pk}/", tool_body(name="private", description="New.", enabled=False), format="json"
    )
    assert response.status_code == 200, response.content
    assert response.json()["version"] == 2 and response.json()["enabled"] is False


def test_a_tool_cannot_change_catalog(as_role, superuser, client_for, catalog) -> None:
    tool = catalog["acme"]
    response = as_role("owner").patch(f"/api/v1/tools/{tool.pk}/", {"tenant": "globex"}, format="json")
    assert response.status_code == 400 and list(response.json()) == ["tenant"]
    response = client_for(superuser).patch(f"/api/v1/tools/{tool.pk}/", {"tenant": None}, format="json")
    assert response.status_code == 400 and "cannot move" in response.json()["tenant"][0]


@pytest.mark.parametrize(("role", "status"), [("owner", 204), ("admin", 204), ("operator", 403), ("viewer", 403)])
def test_who_deletes_tools(role, status, as_role, catalog) -> None:
    tool = catalog["acme"]
    assert as_role(role).delete(f"/api/v1/tools/{tool.pk}/").status_code == status
    assert Tool.objects.filter(pk=tool.pk).exists() == (status != 204)


def test_platform_tools_are_the_platform_admins(superuser, client_for, catalog) -> None:
    client = client_for(superuser)
    tool = catalog["platform"]
    assert client.patch(f"/api/v1/tools/{tool.pk}/", {"title": "Shared"}, format="json").status_code == 200
    assert client.delete(f"/api/v1/tools/{tool.pk}/").status_code == 204


def admin_messages(**fields: Any) -> dict[str, list[str]]:
    """What the admin's validation says about these fields (with valid defaults for the rest)."""
    values: dict[str, Any] = {
        "input_schema": ECHO_SCHEMA,
        "output_schema": None,
        "icons": [],
        "tags": [],
        "backend_kind": "python",
        "backend_config": {"handler": "demo.echo"},
        "description": "x",
    }
    values.update(fields)
    return tool_field_errors(**values)


BAD_FIELDS = [
    ("input_schema", {"type": "array"}),
    ("input_schema", {"type": "object", "properties": {"a": {"type": "nope"}}}),
    ("input_schema", {"type": "object", "properties": {"a": {"$ref": "https://example.com/s.json"}}}),
    ("input_schema", {"$schema": "https://example.com/my-dialect", "type": "object"}),
    ("output_schema", {"type": "string"}),
    ("icons", [{"src": "http://insecure.example/icon.png"}]),
    ("icons", [{"src": "https://ok.example/icon.png", "theme": "blue"}]),
    ("backend_config", {"handler": "no.such.handler"}),
    ("backend_config", {}),
]


@pytest.mark.parametrize(("field", "value"), BAD_FIELDS)
def test_validation_matches_the_admin(as_role, acme, field, value) -> None:
    response = as_role("admin").post("/api/v1/tools/", tool_body(**{field: value}), format="json")
    assert response.status_code == 400
    # The same checks for the same catalog: acme's (which also bounds the handlers listed).
    assert response.json() == {field: admin_messages(tenant_id=acme.pk, **{field: value})[field]}
    assert not Tool.objects.exists()


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"name": "has space"}, "name", "Tool names are 1-128 characters"),
        ({"name": "private"}, "name", "A tool named 'private' already exists in tenant acme."),
        ({"description": ""}, "description", "may not be blank"),
        ({"description": ...}, "description", "required"),
        ({"input_schema": [1]}, "input_schema", "Expected a JSON object"),
        ({"input_schema": {"type": "object", "title": "a\u0000b"}}, "input_schema", "NUL"),
        ({"tags": "search"}, "tags", "Expected a list"),
        ({"tags": [""]}, "tags", "may not be blank"),
        ({"timeout_seconds": 0}, "timeout_seconds", "greater than or equal to 0.1"),
        ({"timeout_seconds": "soon"}, "timeout_seconds", "A valid number is required"),
        ({"backend_kind": "cobol"}, "backend_kind", "not a valid choice"),
        ({"execution_mode": "later"}, "execution_mode", "not a valid choice"),
        ({"tenant": "globex"}, "tenant", "There is no tenant with the slug 'globex'"),
        ({"tenant": 5}, "tenant", "Invalid value"),
    ],
)
def test_validation_errors_name_the_field(as_role, catalog, overrides, field, message) -> None:
    response = as_role("admin").post("/api/v1/tools/", tool_body(**overrides), format="json")
    assert response.status_code == 400
    assert list(response.json()) == [field]
    assert message in str(response.json()[field])


def test_validate_is_a_dry_run(as_role, acme) -> None:
    client = as_role("admin")
    response = client.post("/api/v1/tools/validate/", tool_body(), format="json")
    assert response.status_code == 200, response.content
    assert response.json() == {
        "valid": True,
        "mcp": {"name": "lookup", "description": "Looks things up.", "inputSchema": ECHO_SCHEMA},
    }
    assert not Tool.objects.exists()

    bad = tool_body(input_schema={"type": "array"})
    assert (
        client.post("/api/v1/tools/validate/", bad, format="json").json()
        == client.post("/api/v1/tools/", bad, format="json").json()
    )
    assert not Tool.objects.exists()


@pytest.mark.parametrize(("role", "status"), [("owner", 200), ("admin", 200), ("operator", 403), ("viewer", 403)])
def test_who_validates(role, status, as_role) -> None:
    assert as_role(role).post("/api/v1/tools/validate/", tool_body(), format="json").status_code == status


def test_validate_changes_to_a_tool(as_role, acme, catalog, make_tool) -> None:
    make_tool("other", tenant=acme)
    tool = catalog["acme"]
    client = as_role("admin")
    response = client.post(f"/api/v1/tools/{tool.pk}/validate/", {"title": "Private"}, format="json")
    assert response.status_code == 200 and response.json()["mcp"]["title"] == "Private"
    response = client.post(f"/api/v1/tools/{tool.pk}/validate/", {"name": "other"}, format="json")
    assert response.status_code == 400
    assert response.json() == {"name": ["A tool named 'other' already exists in tenant acme."]}
    tool.refresh_from_db()
    assert (tool.title, tool.name, tool.version) == ("", "private", 1)


def test_deleting_a_granted_tool_deletes_its_rules(as_role, acme, make_tool, grant) -> None:
    tool = make_tool("lookup", tenant=acme)
    rule = grant(acme, tool, owner=acme)
    assert as_role("admin").delete(f"/api/v1/tools/{tool.pk}/").status_code == 204
    assert not AccessRule.objects.filter(pk=rule.pk).exists()


def test_a_worker_timeout_the_broker_cannot_hold_is_refused(as_role) -> None:
    body = tool_body(execution_mode="background", timeout_seconds=86400)
    response = as_role("admin").post("/api/v1/tools/", body, format="json")
    assert response.status_code == 400
    (message,) = response.json()["timeout_seconds"]
    assert "set CELERY_VISIBILITY_TIMEOUT to at least 86462 on every process" in message
    assert not Tool.objects.exists()
