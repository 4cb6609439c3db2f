"""Fixtures for the audit log, the operator console and the metrics.

Personas (on top of tests/conftest.py's ``acme`` and ``globex``): an operator of acme who
is not staff (the console needs no admin rights), an acme viewer (no console), and a
superuser who sees every tenant.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.test import Client
from django.utils import timezone

from audit.journal import invocation_row
from audit.models import AuditEvent, Invocation
from audit.writer import invocation_from_row
from tenants.models import Membership, Tenant
from tenants.services import membership_set


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    """The console reuses chart numbers for a while (console.stats.CACHE_SECONDS)."""
    cache.clear()


@pytest.fixture
def make_user(db: Any) -> Callable[..., Any]:
    def make(username: str, tenant: Tenant | None = None, role: str = Membership.Role.OPERATOR, **fields: Any) -> Any:
        user = get_user_model().objects.create_user(username, password="pw", **fields)
        if tenant is not None:
            membership_set(tenant=tenant, user=user, role=role)
        return user

    return make


def _client_for(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def acme_operator(make_user: Callable[..., Any], acme: Tenant) -> Any:
    return make_user("acme-op", acme)


@pytest.fixture
def operator_client(acme_operator: Any) -> Client:
    return _client_for(acme_operator)


@pytest.fixture
def globex_operator_client(make_user: Callable[..., Any], globex: Tenant) -> Client:
    return _client_for(make_user("globex-op", globex))


@pytest.fixture
def superuser_client(db: Any) -> Client:
    return _client_for(get_user_model().objects.create_superuser("root", password="pw"))


@pytest.fixture
def make_invocation(db: Any) -> Callable[..., Invocation]:
    """make_invocation(tenant, tool="echo", outcome="completed", ago=timedelta(...), **fields) — saved."""

    def make(
        tenant: Tenant,
        tool: str = "echo",
        outcome: str = Invocation.Outcome.COMPLETED,
        *,
        ago: timedelta = timedelta(minutes=1),
        at: datetime | None = None,
        save: bool = True,
        **fields: Any,
    ) -> Invocation:
        fields.setdefault("key_id", None)
        fields.setdefault("key_label", "anonymous")
        fields.setdefault("duration_ms", 12.5)
        row = invocation_from_row(
            invocation_row(
                tenant_id=tenant.pk,
                tool_name=tool,
                outcome=outcome,
                started_at=(at or timezone.now() - ago).timestamp(),
                **fields,
            )
        )
        if save:
            row.save()
        return row

    return make


@pytest.fixture
def two_tenant_rows(acme: Tenant, globex: Tenant, make_invocation: Callable[..., Invocation]) -> dict[str, Any]:
    """One invocation and one change event in each tenant (plus the events of their creation)."""
    return {
        "acme": make_invocation(acme, "acme_tool", error_message="acme failure", outcome="error"),
        "globex": make_invocation(globex, "globex_tool", error_message="globex failure", outcome="error"),
        "acme_event": AuditEvent.objects.filter(tenant=acme).latest("id"),
        "globex_event": AuditEvent.objects.filter(tenant=globex).latest("id"),
    }
