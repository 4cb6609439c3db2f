"""The create_tenant and create_api_key management commands."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from tenants.models import ApiKey, Tenant
from tests.credentials import authenticate


def run(*args: str) -> list[str]:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue().splitlines()


def test_create_tenant(db: Any) -> None:
    lines = run("create_tenant", "initech", "--name", "Initech")
    tenant = Tenant.objects.get(slug="initech")
    assert (tenant.name, tenant.allow_anonymous, tenant.is_active) == ("Initech", False, True)
    assert "/mcp/initech" in lines[-1]


def test_create_public_tenant(db: Any) -> None:
    run("create_tenant", "public", "--name", "Public", "--allow-anonymous")
    assert Tenant.objects.get(slug="public").allow_anonymous is True


def test_a_tenant_and_a_key_in_search_mode(db: Any) -> None:
    run("create_tenant", "big", "--name", "Big", "--tool-listing", "search")
    assert Tenant.objects.get(slug="big").tool_listing == "search"
    run("create_api_key", "big", "--name", "lister", "--tool-listing", "list")
    assert ApiKey.objects.get(name="lister").tool_listing == "list"
    run("create_api_key", "big", "--name", "default")
    assert ApiKey.objects.get(name="default").tool_listing == ""  # as the tenant says
    with pytest.raises(CommandError, match="tool-listing"):
        run("create_tenant", "bad", "--name", "Bad", "--tool-listing", "grep")


def test_create_tenant_with_duplicate_slug_fails(acme) -> None:
    with pytest.raises(CommandError, match="slug"):
        run("create_tenant", "acme", "--name", "Another Acme")
    assert Tenant.objects.filter(slug="acme").count() == 1


def test_create_tenant_with_invalid_slug_fails(db: Any) -> None:
    with pytest.raises(CommandError, match="slug"):
        run("create_tenant", "not a slug", "--name", "X")


def test_create_api_key_prints_the_raw_key_alone_on_the_last_line(acme) -> None:
    lines = run("create_api_key", "acme", "--name", "ci", "--scopes", "tools:read", "tools:call")
    raw = lines[-1]
    assert raw.startswith("tbk_") and raw.strip() == raw and " " not in raw
    principal = authenticate(acme, raw)
    assert principal is not None
    assert principal.scopes == frozenset({"tools:read", "tools:call"})
    key = ApiKey.objects.get(tenant=acme, name="ci")
    assert key.key_hash != raw and raw not in "".join(lines[:-1])


def test_create_api_key_with_expiry(acme) -> None:
    raw = run("create_api_key", "acme", "--name", "temp", "--expires-at", "2099-01-01T00:00:00Z")[-1]
    assert authenticate(acme, raw) is not None
    assert ApiKey.objects.get(name="temp").expires_at.year == 2099


def test_create_api_key_for_unknown_tenant_fails(db: Any) -> None:
    with pytest.raises(CommandError, match="No tenant"):
        run("create_api_key", "nobody", "--name", "ci")
    assert not ApiKey.objects.exists()


@pytest.mark.parametrize("expires_at", ["tomorrow", "2099-01-01T00:00:00", "2000-01-01T00:00:00Z"])
def test_create_api_key_with_bad_expiry_fails(acme, expires_at: str) -> None:
    with pytest.raises(CommandError):
        run("create_api_key", "acme", "--name", "ci", "--expires-at", expires_at)
    assert not ApiKey.objects.exists()


def test_create_api_key_with_taken_name_fails(acme, make_key) -> None:
    make_key(acme, "ci")
    with pytest.raises(CommandError):
        run("create_api_key", "acme", "--name", "ci")
