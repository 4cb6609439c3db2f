"""Personas for the REST API: a platform admin, one member of acme per role, and globex's
admin, who must never see acme's objects (and the other way round)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from tenants.models import Membership, Tenant
from tenants.services import membership_set
from tests.api.roles import ROLES


@pytest.fixture
def superuser(db: Any) -> Any:
    return get_user_model().objects.create_superuser("root", password="pw")


@pytest.fixture
def members(acme: Tenant) -> dict[str, Any]:
    """acme's members by role name (usernames acme-owner, acme-admin, …)."""
    users = {}
    for role in ROLES:
        user = get_user_model().objects.create_user(f"acme-{role}", password="pw")
        membership_set(tenant=acme, user=user, role=role)
        users[role] = user
    return users


@pytest.fixture
def globex_admin(globex: Tenant) -> Any:
    user = get_user_model().objects.create_user("globex-admin", password="pw")
    membership_set(tenant=globex, user=user, role=Membership.Role.ADMIN)
    return user


@pytest.fixture
def client_for() -> Callable[[Any], APIClient]:
    """client_for(user): an API client signed in as that user (a browser session)."""

    def make(user: Any) -> APIClient:
        client = APIClient()
        if user is not None:
            client.force_login(user)
        return client

    return make


@pytest.fixture
def as_role(members: dict[str, Any], client_for: Callable[[Any], APIClient]) -> Callable[[str], APIClient]:
    """as_role("viewer"): a client for acme's member with that role."""
    return lambda role: client_for(members[role])
