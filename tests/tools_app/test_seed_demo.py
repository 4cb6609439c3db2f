"""seed_demo installs the demo pack and tenant, makes no anonymous tenant, and running it again
changes nothing; the conformance suite's fixtures come from ``conformance.seed`` instead."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from conformance.handlers import PACK as CONFORMANCE_PACK
from conformance.seed import seed_conformance
from tenants.models import Membership, Tenant
from tests.credentials import principal_of, visible
from tools_app.catalog.models import AccessRule, Prompt, Resource, ResourceTemplate, Tool
from tools_app.catalog.selectors import catalog_snapshot
from tools_app.catalog.visibility import visible_entries
from tools_app.packs.demo import PACK as DEMO_PACK


def seed() -> str:
    out = StringIO()
    call_command("seed_demo", stdout=out)
    return out.getvalue()


@pytest.fixture
def no_admin_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOOLBAY_ADMIN_PASSWORD", raising=False)


@pytest.fixture(autouse=True)
def fresh_database(db: Any) -> None:
    """A database as ``make run`` finds it the first time: live-server tests commit tenants and
    tools of their own, which this test's transaction hides by deleting them (rolled back after)."""
    AccessRule.objects.all().delete()
    for model in (Tool, Resource, ResourceTemplate, Prompt):
        model.objects.all().delete()
    Tenant.objects.all().delete()
    get_user_model().objects.all().delete()


def test_seed_demo_is_idempotent(db: Any, no_admin_password: None) -> None:
    first = seed()
    tools = dict(Tool.objects.values_list("name", "version"))
    others = [set(model.objects.values_list("pk", "version")) for model in (Resource, ResourceTemplate, Prompt)]
    rules = AccessRule.objects.count()
    seed()
    assert dict(Tool.objects.values_list("name", "version")) == tools
    assert set(tools) == {d.name for d in DEMO_PACK.tools}
    assert set(tools.values()) == {1}
    assert [set(model.objects.values_list("pk", "version")) for model in (Resource, ResourceTemplate, Prompt)] == others
    assert Resource.objects.count() == len(DEMO_PACK.resources)
    assert Prompt.objects.count() == len(DEMO_PACK.prompts)
    assert AccessRule.objects.count() == rules
    assert get_user_model().objects.filter(username="admin").count() == 1
    assert "password (generated, shown only now)" in first


def test_seed_demo_makes_no_anonymous_tenant(db: Any, no_admin_password: None) -> None:
    seed()
    assert list(Tenant.objects.values_list("slug", "allow_anonymous")) == [("demo", False)]
    admin = get_user_model().objects.get(username="admin")
    assert Membership.objects.get(user=admin, tenant__slug="demo").role == Membership.Role.OWNER


def test_the_demo_pack_is_granted_to_demo(db: Any, no_admin_password: None) -> None:
    seed()
    demo = principal_of(Tenant.objects.get(slug="demo"))
    assert {t.name for t in visible(demo)} == {d.name for d in DEMO_PACK.tools}
    snapshot = catalog_snapshot(demo.tenant_id)
    assert {p.name for p in visible_entries(snapshot.prompts, snapshot.rules, demo)} == {
        d.name for d in DEMO_PACK.prompts
    }


def test_seed_demo_keeps_existing_objects(db: Any, no_admin_password: None) -> None:
    Tenant.objects.create(slug="demo", name="My renamed demo")
    seed()
    assert Tenant.objects.get(slug="demo").name == "My renamed demo"


def test_conformance_seed_makes_the_suites_tenant_idempotently(db: Any, no_admin_password: None) -> None:
    seed()
    seed_conformance()
    versions = dict(Tool.objects.filter(tags=["conformance"]).values_list("name", "version"))
    rules = AccessRule.objects.count()
    seed_conformance()
    assert dict(Tool.objects.filter(tags=["conformance"]).values_list("name", "version")) == versions
    assert AccessRule.objects.count() == rules
    conformance = Tenant.objects.get(slug="conformance")
    assert conformance.allow_anonymous is True
    principal = principal_of(conformance)
    assert {t.name for t in visible(principal)} == {d.name for d in CONFORMANCE_PACK.tools}
    snapshot = catalog_snapshot(conformance.pk)
    assert {r.uri for r in visible_entries(snapshot.resources, snapshot.rules, principal)} == {
        d.uri for d in CONFORMANCE_PACK.resources
    }
    assert {t.name for t in visible_entries(snapshot.templates, snapshot.rules, principal)} == {
        d.name for d in CONFORMANCE_PACK.templates
    }
    assert {p.name for p in visible_entries(snapshot.prompts, snapshot.rules, principal)} == {
        d.name for d in CONFORMANCE_PACK.prompts
    }
    # The demo tenant sees none of the fixtures, nor the fixtures' tenant the demo pack.
    assert not {t.name for t in visible(principal_of(Tenant.objects.get(slug="demo")))} & set(versions)
