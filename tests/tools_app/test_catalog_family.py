"""The catalog family: tools, resources, resource templates and prompts share one base model,
one set of services and one clash message; every platform-or-tenant model has the same pair
of uniqueness constraints."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import IntegrityError, transaction
from django.test import Client
from django.urls import reverse

from tools_app.backends.models import BackendSecret
from tools_app.backends.upstream.models import UpstreamServer
from tools_app.catalog.definitions import (
    EntryDefinition,
    PromptDefinition,
    ResourceDefinition,
    ResourceTemplateDefinition,
    ToolDefinition,
)
from tools_app.catalog.models import Prompt, Resource, ResourceTemplate, Tool
from tools_app.catalog.services import catalog_entry_delete, catalog_entry_install

pytestmark = pytest.mark.django_db

DEFINITIONS: list[EntryDefinition] = [
    ToolDefinition(name="family.echo", handler="demo.echo", description="Echoes."),
    ResourceDefinition(uri="doc://family", name="family-doc", text="Hello"),
    ResourceTemplateDefinition(uri_template="file:///logs/{day}.txt", name="family-logs", handler="demo.time_in"),
    PromptDefinition(
        name="family.greet",
        description="Greets.",
        messages=[{"role": "user", "content": {"type": "text", "text": "Hi"}}],
    ),
]


@pytest.mark.parametrize("definition", DEFINITIONS, ids=lambda d: type(d).__name__)
def test_install_is_idempotent_and_a_change_moves_the_version(definition: EntryDefinition) -> None:
    # Packs install into the platform catalog (tenants are granted them by rules).
    entry = catalog_entry_install(definition=definition, tags=["family"])
    assert entry.tenant is None and entry.tags == ["family"] and entry.version == 1
    again = catalog_entry_install(definition=definition, tags=["family"])
    assert again.pk == entry.pk and again.version == 1
    changed = catalog_entry_install(definition=definition, tags=["family", "more"])
    assert changed.pk == entry.pk and changed.version == 2
    assert str(changed) == (definition.uri if isinstance(definition, ResourceDefinition) else definition.name)
    catalog_entry_delete(entry=changed)
    assert not type(entry).objects.filter(pk=entry.pk).exists()


@pytest.mark.parametrize(
    ("model", "field"),
    [
        (Tool, "name"),
        (Resource, "uri"),
        (ResourceTemplate, "name"),
        (Prompt, "name"),
        (BackendSecret, "name"),
        (UpstreamServer, "name"),
    ],
)
def test_every_platform_or_tenant_model_is_unique_per_catalog(model: Any, field: str) -> None:
    prefix = model._meta.model_name
    names = {constraint.name for constraint in model._meta.constraints}
    assert {f"{prefix}_unique_platform_{field}", f"{prefix}_unique_private_{field}"} <= names


def test_the_database_holds_a_name_once_per_catalog(acme, globex) -> None:
    BackendSecret.objects.create(tenant=acme, name="token", ciphertext="x")
    BackendSecret.objects.create(tenant=globex, name="token", ciphertext="x")
    BackendSecret.objects.create(tenant=None, name="token", ciphertext="x")
    for tenant in (acme, None):
        with pytest.raises(IntegrityError), transaction.atomic():
            BackendSecret.objects.create(tenant=tenant, name="token", ciphertext="x")


ENTRY_FORMS = [
    (
        "resource",
        {"uri": "doc://taken", "name": "taken", "backend_kind": "static", "text": "x", "audience": "[]"},
        "uri",
        "A resource at 'doc://taken' already exists in tenant acme.",
    ),
    (
        "resourcetemplate",
        {"uri_template": "doc://{x}", "name": "taken", "backend_kind": "python", "audience": "[]"},
        "name",
        "A resource template named 'taken' already exists in tenant acme.",
    ),
    (
        "prompt",
        {
            "name": "taken",
            "description": "Takes.",
            "backend_kind": "template",
            "arguments": "[]",
            "messages": '[{"role": "user", "content": {"type": "text", "text": "x"}}]',
        },
        "name",
        "A prompt named 'taken' already exists in tenant acme.",
    ),
]


@pytest.mark.parametrize(("kind", "fields", "key", "message"), ENTRY_FORMS, ids=[kind for kind, *_ in ENTRY_FORMS])
def test_the_admin_says_which_catalog_a_name_clashes_in(
    acme_admin_client: Client, acme, kind: str, fields: dict[str, str], key: str, message: str
) -> None:
    data = {
        "tenant": acme.pk,
        "timeout_seconds": "30",
        "icons": "[]",
        "tags": "[]",
        "backend_config": '{"handler": "demo.time_in"}' if kind == "resourcetemplate" else "{}",
        "completions": "{}",
        "enabled": "on",
        **fields,
    }
    add = reverse(f"admin:tools_app_{kind}_add")
    first = acme_admin_client.post(add, data)
    assert first.status_code == 302, first.content.decode()[:2000]
    refused = acme_admin_client.post(add, data)
    assert refused.status_code == 200
    assert refused.context["adminform"].form.errors == {key: [message]}
