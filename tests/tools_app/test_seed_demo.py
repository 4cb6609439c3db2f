"""seed_demo installs the packs and tenants, and running it again changes nothing."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from tenants.models import Membership, Tenant
from tests.credentials import principal_of, visible
from tools_app.catalog.models import AccessRule, Prompt, Resource, ResourceTemplate, Tool
from tools_app.catalog.selectors import catalog_snapshot
from tools_app.catalog.visibility import visible_entries
from tools_app.packs import PACKS


def seed() -> str:
    out = StringIO()
    call_command("seed_demo", stdout=out)
    return out.getvalue()


@pytest.fixture
def no_admin_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOOLBAY_ADMIN_PASSWORD", raising=False)


def test_seed_demo_is_idempotent(db: Any, no_admin_password: None) -> None:
    first = seed()
    tools = dict(Tool.objects.values_list("name", "version"))
    others = [set(model.objects.values_list("pk", "version")) for model in (Resource, ResourceTemplate, Prompt)]
    rules = AccessRule.objects.count()
    seed()
    assert dict(Tool.objects.values_list("name", "version")) == tools
    assert Tool.objects.count() == len(tools) == sum(len(pack.tools) for pack in PACKS.values())
    assert set(tools.values()) == {1}
    assert [set(model.objects.values_list("pk", "version")) for model in (Resource, ResourceTemplate, Prompt)] == others
    assert Resource.objects.count() == sum(len(pack.resources) for pack in PACKS.values())
    assert Prompt.objects.count() == sum(len(pack.prompts) for pack in PACKS.values())
    assert AccessRule.objects.count() == rules
    assert get_user_model().objects.filter(username="admin").count() == 1
    assert "password (generated, shown only now)" in first


def test_seed_demo_creates_the_tenants(db: Any, no_admin_password: None) -> None:
    seed()
    demo = Tenant.objects.get(slug="demo")
    conformance = Tenant.objects.get(slug="conformance")
    assert conformance.allow_anonymous is True
    assert demo.allow_anonymous is False
    admin = get_user_model().objects.get(username="admin")
    assert Membership.objects.get(user=admin, tenant=demo).role == Membership.Role.OWNER


def test_seeded_packs_are_granted_to_their_tenants(db: Any, no_admin_password: None) -> None:
    seed()
    conformance = Tenant.objects.get(slug="conformance")
    principal = principal_of(conformance)
    names = {t.name for t in visible(principal)}
    assert names == {d.name for d in PACKS["conformance"].tools}
    snapshot = catalog_snapshot(conformance.pk)
    pack = PACKS["conformance"]
    assert {r.uri for r in visible_entries(snapshot.resources, snapshot.rules, principal)} == {
        d.uri for d in pack.resources
    }
    assert {t.name for t in visible_entries(snapshot.templates, snapshot.rules, principal)} == {
        d.name for d in pack.templates
    }
    assert {p.name for p in visible_entries(snapshot.prompts, snapshot.rules, principal)} == {
        d.name for d in pack.prompts
    }
    demo = principal_of(Tenant.objects.get(slug="demo"))
    demo_snapshot = catalog_snapshot(demo.tenant_id)
    assert {p.name for p in visible_entries(demo_snapshot.prompts, demo_snapshot.rules, demo)} == {
        d.name for d in PACKS["demo"].prompts
    }


def test_seed_demo_keeps_existing_objects(db: Any, no_admin_password: None) -> None:
    Tenant.objects.create(slug="demo", name="My renamed demo")
    seed()
    assert Tenant.objects.get(slug="demo").name == "My renamed demo"
