"""Shared fixtures: the cast of tenants every test can lean on, keys, tools and grants, each
made through the services the admin and the API use.

Personas: ``acme`` and ``globex`` are two tenants that must never see each other's data.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import redis
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client

from mcp_platform.redis_clients import sync_redis
from oauth.resource.verifier import token_verifier
from tenants.auth import tenant_directory
from tenants.models import ApiKey, Membership, Tenant
from tenants.services import api_key_create, membership_set, tenant_create
from tests.makers import rule_grant, tool_make
from tools_app.catalog.cache import catalog_cache
from tools_app.catalog.models import AccessRule, Tool


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    """A plain HTTP client for tests that speak MCP by hand to a live server."""
    with httpx.Client(timeout=60) as client:
        yield client


@pytest.fixture(scope="session")
def django_db_setup(django_test_environment: None, django_db_blocker: Any) -> Iterator[None]:
    """Always create the test database, also when only live-server tests (which use no
    ``db`` fixture, their data being committed for other processes) are collected."""
    from django.test.utils import setup_databases, teardown_databases

    with django_db_blocker.unblock():
        config = setup_databases(verbosity=0, interactive=False, aliases={"default"})
    yield
    with django_db_blocker.unblock():
        teardown_databases(config, verbosity=0)


@pytest.fixture(scope="session", autouse=True)
def _clean_test_redis() -> Iterator[None]:
    """The test Redis db belongs to the suite: start it empty."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.flushdb()
    yield
    client.close()


@pytest.fixture(autouse=True)
def _fresh_caches() -> Iterator[None]:
    """Each test starts like a fresh process: no tenant or catalog cached from another test."""
    tenant_directory.clear()
    catalog_cache.clear()
    token_verifier.clear()
    # Failed sign-ins are counted in Redis per address; every test client is 127.0.0.1.
    client = sync_redis()
    for key in client.scan_iter("toolbay:signin:*"):
        client.delete(key)
    yield
    tenant_directory.clear()
    catalog_cache.clear()
    token_verifier.clear()


@pytest.fixture
def acme(db: Any) -> Tenant:
    return tenant_create(slug="acme", name="Acme Corp")


@pytest.fixture
def globex(db: Any) -> Tenant:
    return tenant_create(slug="globex", name="Globex Inc")


@pytest.fixture
def make_key(db: Any) -> Callable[..., tuple[ApiKey, str]]:
    def make(tenant: Tenant, name: str = "test key", **kwargs: Any) -> tuple[ApiKey, str]:
        return api_key_create(tenant=tenant, name=name, **kwargs)

    return make


@pytest.fixture
def make_tool(db: Any) -> Callable[..., Tool]:
    return tool_make


@pytest.fixture
def grant(db: Any) -> Callable[..., AccessRule]:
    return rule_grant


@pytest.fixture
def make_staff(db: Any) -> Callable[..., Any]:
    """make_staff("alice", acme, role="admin"): a staff user holding that membership and no
    Django permission rows (tenant admins get their rights from memberships alone)."""

    def make(username: str, tenant: Tenant | None = None, role: str = Membership.Role.ADMIN) -> Any:
        user = get_user_model().objects.create_user(username, password="pw", is_staff=True)
        if tenant is not None:
            membership_set(tenant=tenant, user=user, role=role)
        return user

    return make


@pytest.fixture
def acme_admin_client(make_staff: Callable[..., Any], acme: Tenant) -> Client:
    """The Django admin as a staff user who administers acme (and nothing else)."""
    client = Client()
    client.force_login(make_staff("acme-admin", acme))
    return client
