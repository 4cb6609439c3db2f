"""/api/v1/tools/{id}/curation/: what the model sees of a tool, next to its source; who may
change it, refusals naming the argument, and the change published like any other."""

from __future__ import annotations

import pytest

from tests.api.generations import generation
from tools_app.catalog.models import Tool, ToolCuration

pytestmark = pytest.mark.django_db

SCHEMA = {
    "type": "object",
    "properties": {"text": {"type": "string"}, "lang": {"type": "string", "enum": ["en", "de", "fr"]}},
    "required": ["text", "lang"],
}


@pytest.fixture
def tools(acme, globex, make_tool) -> dict[str, Tool]:
    return {
        "acme": make_tool("translate", tenant=acme, input_schema=SCHEMA),
        "globex": make_tool("translate", tenant=globex, input_schema=SCHEMA),
        "platform": make_tool("shared", input_schema=SCHEMA),
    }


def test_side_by_side_and_partial_changes(as_role, tools) -> None:
    url = f"/api/v1/tools/{tools['acme'].pk}/curation/"
    empty = as_role("viewer").get(url).json()
    assert empty["version"] is None and empty["source"] == empty["published"]
    body = {"name": "to_german", "arguments": {"lang": {"hidden": True, "value": "de"}}}
    answer = as_role("admin").put(url, body, format="json")
    assert answer.status_code == 200, answer.json()
    data = answer.json()
    assert data["source"]["name"] == "translate" and data["published"]["name"] == "to_german"
    assert set(data["source"]["inputSchema"]["properties"]) == {"text", "lang"}
    assert data["published"]["inputSchema"] == {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    }
    patched = as_role("owner").patch(url, {"description": "Translates into German."}, format="json").json()
    assert patched["name"] == "to_german" and patched["published"]["description"] == "Translates into German."
    assert patched["version"] == data["version"] + 1
    assert as_role("admin").delete(url).status_code == 204
    assert not ToolCuration.objects.exists()


def test_widening_is_a_400_naming_the_argument(as_role, tools) -> None:
    url = f"/api/v1/tools/{tools['acme'].pk}/curation/"
    answer = as_role("admin").put(url, {"arguments": {"lang": {"enum": ["en", "it"]}}}, format="json")
    assert answer.status_code == 400
    assert "arguments.lang.enum: 'it' is not one of the source's values" in answer.json()["arguments"][0]
    assert as_role("admin").put(url, {"arguments": []}, format="json").status_code == 400
    assert not ToolCuration.objects.exists()


@pytest.mark.parametrize(("role", "status"), [("owner", 200), ("admin", 200), ("operator", 403), ("viewer", 403)])
def test_who_curates(role, status, as_role, tools) -> None:
    url = f"/api/v1/tools/{tools['acme'].pk}/curation/"
    assert as_role(role).patch(url, {"title": "T"}, format="json").status_code == status
    assert as_role(role).get(url).status_code == 200


def test_other_tenants_and_platform_tools_look_missing(as_role, globex_admin, client_for, superuser, tools) -> None:
    for tool in (tools["globex"], tools["platform"]):
        url = f"/api/v1/tools/{tool.pk}/curation/"
        assert as_role("admin").get(url).status_code == 404
        assert as_role("admin").put(url, {"title": "mine"}, format="json").status_code == 404
    assert client_for(globex_admin).get(f"/api/v1/tools/{tools['acme'].pk}/curation/").status_code == 404
    platform = client_for(superuser).put(
        f"/api/v1/tools/{tools['platform'].pk}/curation/", {"title": "P"}, format="json"
    )
    assert platform.status_code == 200 and platform.json()["published"]["title"] == "P"


@pytest.mark.django_db(transaction=True)  # real commits: the change is published after commit
def test_a_curation_change_is_published(as_role, acme, make_tool) -> None:
    tool = make_tool("translate", tenant=acme, input_schema=SCHEMA)
    before = generation("acme")
    as_role("admin").patch(f"/api/v1/tools/{tool.pk}/curation/", {"title": "T"}, format="json")
    assert generation("acme") == before + 1


def test_in_the_openapi_schema(client_for, superuser) -> None:
    schema = client_for(superuser).get("/api/schema/", {"format": "json"}).json()
    operations = schema["paths"]["/api/v1/tools/{id}/curation/"]
    assert set(operations) >= {"get", "put", "patch", "delete"}
