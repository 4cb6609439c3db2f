"""seed_demo installs the packs and tenants, and running it again changes nothing."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from tenants.models import Membership, Tenant
from tests.credentials import principal_of, visible
from tools_app.catalog.models import AccessRule, Tool
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
    rules = AccessRule.objects.count()
    seed()
    assert dict(Tool.objects.values_list("name", "version")) == tools
    assert Tool.objects.count() == len(tools) == sum(len(pack) for pack in PACKS.values())
    assert set(tools.values()) == {1}
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
    names = {t.name for t in visible(principal_of(conformance))}
    assert names == {d.name for d in PACKS["conformance"]}


def test_seed_demo_keeps_existing_objects(db: Any, no_admin_password: None) -> None:
    Tenant.objects.create(slug="demo", name="My renamed demo")
    seed()
    assert Tenant.objects.get(slug="demo").name == "My renamed demo"
