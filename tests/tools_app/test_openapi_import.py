"""The OpenAPI import on a small hand-made document: what the tools look like, the command's
contract, re-imports, refusals naming the place, and the REST endpoint (with another tenant)."""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from jsonschema import Draft202012Validator
from rest_framework.test import APIClient

from tenants.models import Tenant
from tools_app.backends.models import BackendSecret
from tools_app.catalog.models import AccessRule, PendingDefinition, Tool
from tools_app.imports.openapi.models import OpenApiOperation, OpenApiSource

PETSTORE: dict[str, Any] = {
    "openapi": "3.0.3",
    "info": {"title": "Pet Store", "version": "1"},
    "servers": [{"url": "https://{region}.pets.example/v1", "variables": {"region": {"default": "eu"}}}],
    "security": [{"key": []}],
    "components": {
        "securitySchemes": {"key": {"type": "apiKey", "in": "header", "name": "X-Api-Key"}},
        "schemas": {
            "Pet": {
                "type": "object",
                "required": ["name"],
                "properties": {
                    "id": {"type": "integer", "format": "int64", "readOnly": True},
                    "name": {"type": "string", "example": "Rex"},
                    "tag": {"type": "string", "nullable": True},
                    "password": {"type": "string", "writeOnly": True},
                    "parent": {"$ref": "#/components/schemas/Pet"},
                    "weight": {"type": "number", "minimum": 0, "exclusiveMinimum": True},
                },
            },
        },
        "parameters": {"limit": {"name": "limit", "in": "query", "schema": {"type": "integer", "maximum": 100}}},
    },
    "paths": {
        "/pets": {
            "get": {
                "operationId": "listPets",
                "summary": "List pets",
                "tags": ["pets"],
                "parameters": [
                    {"$ref": "#/components/parameters/limit"},
                    {"name": "X-Trace", "in": "header", "schema": {"type": "string"}},
                    {"name": "session", "in": "cookie", "schema": {"type": "string"}},
                ],
                "responses": {
                    "200": {
                        "description": "ok",
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "properties": {
                                        "items": {"type": "array", "items": {"$ref": "#/components/schemas/Pet"}}
                                    },
                                }
                            }
                        },
                    }
                },
            },
            "post": {
                "operationId": "createPet",
                "description": "Add a pet to the store.",
                "tags": ["pets"],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Pet"}}},
                },
                "responses": {
                    "201": {
                        "description": "made",
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Pet"}}},
                    }
                },
            },
        },
        "/pets/{petId}": {
            "parameters": [{"name": "petId", "in": "path", "required": True, "schema": {"type": "string"}}],
            "get": {"operationId": "get pet!", "tags": ["pets"], "responses": {"200": {"description": "ok"}}},
            "put": {
                "operationId": "replacePet",
                "tags": ["admin"],
                "requestBody": {
                    "content": {"application/json": {"schema": {"type": "array", "items": {"type": "string"}}}}
                },
                "responses": {"204": {"description": "ok"}},
            },
            "delete": {"tags": ["admin"], "security": [], "responses": {"204": {"description": "gone"}}},
        },
        "/upload": {
            "post": {
                "operationId": "upload",
                "requestBody": {"required": True, "content": {"multipart/form-data": {"schema": {"type": "object"}}}},
                "responses": {"200": {"description": "ok"}},
            },
        },
    },
}


def _write(tmp_path: Path, document: dict[str, Any], name: str = "pets.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(document))
    return str(path)


def _run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("import_openapi", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.mark.django_db
def test_each_operation_becomes_an_http_tool(tmp_path: Path, acme: Tenant) -> None:
    BackendSecret.objects.create(tenant=acme, name="pets-key", ciphertext="x")
    out, err = _run(_write(tmp_path, PETSTORE), "--tenant", acme.slug, "--prefix", "pets_", "--grant")
    lines = out.splitlines()
    assert lines == [
        "created pets_listPets  GET /pets",
        "created pets_createPet  POST /pets",
        "created pets_get_pet  GET /pets/{petId}",
        "created pets_replacePet  PUT /pets/{petId}",
        "created pets_delete_pets_petId  DELETE /pets/{petId}",
    ]
    assert "skipped POST /upload: paths./upload.post.requestBody: the body is multipart/form-data" in err

    listing = Tool.objects.get(tenant=acme, name="pets_listPets")
    assert listing.title == "List pets" and listing.read_only_hint and not listing.destructive_hint
    assert listing.backend_config == {
        "method": "GET",
        "url": "https://eu.pets.example/v1/pets",
        "query": {"limit": "{limit}"},
        "headers": {"X-Trace": "{X-Trace}", "Cookie": "session={session}"},
        "body": "none",
        "auth": {"type": "header", "header": "X-Api-Key", "secret": "pets-key"},
    }
    assert listing.input_schema["additionalProperties"] is False
    assert listing.input_schema["properties"]["limit"] == {"type": "integer", "maximum": 100}
    pet = listing.output_schema["$defs"]["Pet"]
    assert pet["properties"]["tag"]["type"] == ["string", "null"]
    assert pet["properties"]["id"] == {"type": "integer", "format": "int64", "readOnly": True}
    assert pet["properties"]["password"]["writeOnly"] is True
    assert pet["properties"]["parent"] == {"$ref": "#/$defs/Pet"}  # recursive, and finite
    assert pet["properties"]["weight"] == {"type": "number", "exclusiveMinimum": 0}
    assert pet["properties"]["name"]["examples"] == ["Rex"]

    create = Tool.objects.get(tenant=acme, name="pets_createPet")
    assert create.description == "Add a pet to the store."
    assert create.read_only_hint is False and create.destructive_hint is False and create.idempotent_hint is False
    assert create.input_schema["required"] == ["name"]  # the body's properties are the arguments
    # id is readOnly: the server sets it, so it is no argument; writeOnly password is one.
    assert set(create.input_schema["properties"]) == {"name", "tag", "password", "parent", "weight"}
    assert create.backend_config["body"]["template"]["name"] == "{name}"
    assert create.output_schema["properties"]["name"] == {"type": "string", "examples": ["Rex"]}

    replace = Tool.objects.get(tenant=acme, name="pets_replacePet")
    assert replace.idempotent_hint is True
    assert replace.backend_config["url"] == "https://eu.pets.example/v1/pets/{petId}"
    assert replace.backend_config["body"] == {"template": "{body}"}  # not an object: one argument
    delete = Tool.objects.get(tenant=acme, name="pets_delete_pets_petId")
    assert delete.destructive_hint is True and "auth" not in delete.backend_config  # security: []
    for tool in Tool.objects.filter(tenant=acme):
        Draft202012Validator.check_schema(tool.input_schema)
        assert tool.tags == ["openapi:pets"]
    assert AccessRule.objects.filter(tenant=acme, tool_pattern="tag:openapi:pets").exists()
    source = OpenApiSource.objects.get(tenant=acme, name="pets")
    assert source.options["prefix"] == "pets_" and len(source.sha256) == 64
    assert OpenApiOperation.objects.filter(source=source).count() == 5


@pytest.mark.django_db
def test_selection_dry_run_and_reimport(tmp_path: Path, acme: Tenant) -> None:
    path = _write(tmp_path, PETSTORE)
    out, _ = _run(path, "--tenant", acme.slug, "--tag", "admin", "--dry-run")
    assert out.splitlines() == [
        "would create replacePet  PUT /pets/{petId}",
        "would create delete_pets_petId  DELETE /pets/{petId}",
    ]
    assert not Tool.objects.filter(tenant=acme).exists() and not OpenApiSource.objects.exists()
    out, err = _run(path, "--tenant", acme.slug, "--include", "listPets", "createPet")
    assert len(out.splitlines()) == 2 and "note: security scheme 'key': store the secret" in err

    changed = copy.deepcopy(PETSTORE)
    changed["paths"]["/pets"]["get"]["summary"] = "List every pet"
    v2 = _write(tmp_path, changed, "v2.json")
    # Without --approve a changed definition waits (pinned definitions); clients keep the old one.
    out, err = _run(v2, "--tenant", acme.slug, "--include", "listPets", "createPet")
    assert out.splitlines() == ["parked listPets  GET /pets  (title, description)"]
    assert "1 waiting for approval" in err
    listing = Tool.objects.get(tenant=acme, name="listPets")
    assert listing.title == "List pets"
    pending = PendingDefinition.objects.get(tool=listing, status="pending")
    assert pending.source_kind == "openapi" and pending.source_name == "pet-store"
    assert pending.diff["title"] == ["List pets", "List every pet"]
    # The same again parks nothing new; a dry run with --approve says it would update.
    out, _ = _run(v2, "--tenant", acme.slug, "--include", "listPets", "createPet")
    assert out.splitlines() == ["parked listPets  GET /pets  (title, description)"]
    assert PendingDefinition.objects.filter(tool=listing).count() == 1
    out, _ = _run(v2, "--tenant", acme.slug, "--include", "listPets", "--approve", "--dry-run")
    assert out.splitlines() == ["would update listPets  GET /pets  (title, description)"]
    # --approve: the admin running the import approves it; the waiting proposal is superseded.
    out, err = _run(v2, "--tenant", acme.slug, "--include", "listPets", "createPet", "--approve")
    assert out.splitlines() == ["updated listPets  GET /pets  (title, description)"]
    assert Tool.objects.get(tenant=acme, name="listPets").title == "List every pet"
    pending.refresh_from_db()
    assert pending.status == "superseded"
    out, err = _run(v2, "--tenant", acme.slug, "--include", "listPets", "--approve")
    assert out == "" and "(document unchanged)" in err and "kept createPet" in err


@pytest.mark.django_db
def test_reimport_applies_tags_parks_the_definition_and_trusts_an_auto_approve_source(
    tmp_path: Path, acme: Tenant
) -> None:
    _run(_write(tmp_path, PETSTORE), "--tenant", acme.slug, "--include", "listPets")
    changed = copy.deepcopy(PETSTORE)
    changed["servers"] = [{"url": "https://pets.attacker.example/v1"}]  # where calls (and the key) would go
    v2 = _write(tmp_path, changed, "v2.json")
    out, _ = _run(v2, "--tenant", acme.slug, "--include", "listPets", "--label", "crm")
    assert out.splitlines() == ["parked listPets  GET /pets  (backend_config, tags)"]
    listing = Tool.objects.get(tenant=acme, name="listPets")
    assert listing.tags == ["openapi:pet-store", "crm"]  # the admin's own option: at once
    assert listing.backend_config["url"] == "https://eu.pets.example/v1/pets"  # pinned
    pending = PendingDefinition.objects.get(tool=listing, status="pending")
    assert set(pending.proposed) == {"backend_config"}

    source = OpenApiSource.objects.get(tenant=acme)
    source.auto_approve = True
    source.save()
    out, _ = _run(v2, "--tenant", acme.slug, "--include", "listPets", "--label", "crm")
    assert out.splitlines() == ["updated listPets  GET /pets  (backend_config)"]
    listing.refresh_from_db()
    assert listing.backend_config["url"] == "https://pets.attacker.example/v1/pets"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["paths"]["/pets"]["get"].update(parameters=[{"name": "a", "in": "query"}, {}, {"in": "x"}]),
         "paths./pets.get"),
        (lambda d: d.update(openapi="4.0.0"), "openapi: unsupported version '4.0.0'"),
        (lambda d: d["components"]["schemas"].update(Pet=[]), "components.schemas.Pet: "),
        (lambda d: d.pop("servers"), "servers: no absolute server URL"),
    ],
)  # fmt: skip
def test_a_document_that_cannot_be_used_names_the_place(
    tmp_path: Path, acme: Tenant, change: Any, message: str
) -> None:
    broken = copy.deepcopy(PETSTORE)
    change(broken)
    if message == "paths./pets.get":  # one broken operation: skipped with its place, the rest imported
        _, err = _run(_write(tmp_path, broken), "--tenant", acme.slug)
        assert "skipped GET /pets: paths./pets.get.parameters[0]: " in err
        assert Tool.objects.filter(tenant=acme).count() == 4
        return
    with pytest.raises(CommandError, match=message.replace("(", r"\(")):
        _run(_write(tmp_path, broken), "--tenant", acme.slug)
    assert not Tool.objects.filter(tenant=acme).exists() and not OpenApiSource.objects.exists()


@pytest.mark.django_db
def test_yaml_and_refusal_of_garbage(tmp_path: Path, acme: Tenant) -> None:
    import yaml

    path = tmp_path / "pets.yaml"
    path.write_text(yaml.safe_dump(PETSTORE).replace("'200'", "200"))
    out, _ = _run(str(path), "--tenant", acme.slug, "--include", "listPets")
    assert out.splitlines() == ["created listPets  GET /pets"]
    assert Tool.objects.get(tenant=acme, name="listPets").output_schema is not None
    (tmp_path / "bad.json").write_text("{: nope")
    with pytest.raises(CommandError, match="neither JSON nor YAML"):
        _run(str(tmp_path / "bad.json"), "--tenant", acme.slug)


@pytest.mark.django_db
def test_rest_endpoint_previews_imports_and_keeps_tenants_apart(acme: Tenant, globex: Tenant, make_staff: Any) -> None:
    acme_admin_client = APIClient()
    acme_admin_client.force_login(make_staff("acme-admin", acme))
    viewer = APIClient()
    viewer.force_login(make_staff("acme-viewer", acme, role="viewer"))
    body = {"tenant": acme.slug, "document": json.dumps(PETSTORE), "prefix": "p_", "dry_run": True}
    assert viewer.post("/api/v1/openapi-imports/", body, format="json").status_code == 403
    preview = acme_admin_client.post("/api/v1/openapi-imports/", body, format="json")
    assert preview.status_code == 200, preview.content
    assert [tool["action"] for tool in preview.json()["tools"]] == ["create"] * 5
    assert preview.json()["skipped"][0]["reason"].startswith("paths./upload.post.requestBody")
    assert not Tool.objects.filter(tenant=acme).exists()
    done = acme_admin_client.post("/api/v1/openapi-imports/", {**body, "dry_run": False}, format="json")
    assert done.status_code == 201 and Tool.objects.filter(tenant=acme).count() == 5
    other = acme_admin_client.post("/api/v1/openapi-imports/", {**body, "tenant": globex.slug}, format="json")
    assert other.status_code == 400 and "tenant" in other.json()  # another tenant looks missing
    broken = acme_admin_client.post(
        "/api/v1/openapi-imports/", {**body, "document": '{"openapi": "3.0.0"}'}, format="json"
    )
    assert broken.status_code == 400 and broken.json()["document"][0].startswith("(the document): ")


@pytest.mark.django_db
def test_admin_import_page_previews_then_imports(acme: Tenant, globex: Tenant, acme_admin_client: Any) -> None:
    page = "/admin/tools_app/openapisource/add/"
    assert acme_admin_client.get(page).status_code == 200
    form = {"tenant": acme.pk, "text": json.dumps(PETSTORE), "name_prefix": "adm_", "include": "listPets createPet"}
    preview = acme_admin_client.post(page, {**form, "_preview": "Preview"})
    assert preview.status_code == 200
    assert b"adm_listPets" in preview.content and b"GET /pets" in preview.content
    assert not Tool.objects.filter(tenant=acme).exists()
    done = acme_admin_client.post(page, {**form, "_import": "Import", "grant": "on"})
    assert done.status_code == 302
    assert set(Tool.objects.filter(tenant=acme).values_list("name", flat=True)) == {"adm_listPets", "adm_createPet"}
    # Another tenant is no choice: it looks missing.
    refused = acme_admin_client.post(page, {**form, "tenant": globex.pk, "_import": "Import"})
    assert refused.status_code == 200 and not Tool.objects.filter(tenant=globex).exists()
    broken = acme_admin_client.post(page, {**form, "text": '{"openapi": "3.0.0"}', "_preview": "Preview"})
    assert b"(the document): " in broken.content


@pytest.mark.django_db
def test_a_yaml_alias_bomb_is_refused(tmp_path: Path, acme: Tenant) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    (tmp_path / "bomb.yaml").write_text("\n".join(lines) + "\n")
    with pytest.raises(CommandError, match="more than 5000000 values"):
        _run(str(tmp_path / "bomb.yaml"), "--tenant", acme.slug)


@pytest.mark.django_db
def test_deep_nesting_is_refused_or_skipped_not_crashed(tmp_path: Path, acme: Tenant) -> None:
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(CommandError, match="nests too deeply"):
        _run(str(tmp_path / "deep.json"), "--tenant", acme.slug)
    deep = copy.deepcopy(PETSTORE)
    deep["paths"]["/pets"]["get"]["parameters"] = [{"name": "q", "in": "query", "schema": "NESTED"}]
    # 400 levels: the document parses (Python's limit is 1,000), converting them would not.
    nested = '{"type": "object", "properties": {"a": ' * 400 + '{"type": "string"}' + "}}" * 400
    (tmp_path / "nested.json").write_text(json.dumps(deep).replace('"NESTED"', nested))
    _, err = _run(str(tmp_path / "nested.json"), "--tenant", acme.slug)
    assert "skipped GET /pets: paths./pets.get" in err
