"""/api/v1/api-keys/: MCP API keys; the raw key is in the create answer only; revoke."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from tenants import keys
from tenants.models import ApiKey
from tests.api.generations import generation
from tests.api.pages import ids
from tests.api.roles import ROLES
from tests.credentials import authenticate

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("role", ROLES)
def test_members_list_their_tenants_keys(role, as_role, acme, globex, make_key) -> None:
    mine, _ = make_key(acme, "mine")
    make_key(globex, "theirs")
    client = as_role(role)
    assert ids(client.get("/api/v1/api-keys/")) == [mine.pk]
    row = client.get(f"/api/v1/api-keys/{mine.pk}/").json()
    assert row["prefix"] == mine.prefix and row["status"] == "active"
    assert "key" not in row and "key_hash" not in row


def test_other_tenants_keys_look_missing(acme, globex_admin, client_for, make_key) -> None:
    key, _ = make_key(acme)
    client = client_for(globex_admin)
    assert client.get("/api/v1/api-keys/").json()["results"] == []
    assert client.get(f"/api/v1/api-keys/{key.pk}/").status_code == 404
    assert client.patch(f"/api/v1/api-keys/{key.pk}/", {"name": "mine now"}, format="json").status_code == 404
    assert client.post(f"/api/v1/api-keys/{key.pk}/revoke/").status_code == 404
    key.refresh_from_db()
    assert key.revoked_at is None and key.name == "test key"


def test_filters(as_role, acme, make_key) -> None:
    live, _ = make_key(acme, "live")
    dead, _ = make_key(acme, "dead")
    dead.revoked_at = timezone.now()
    dead.save()
    client = as_role("viewer")
    assert ids(client.get("/api/v1/api-keys/?revoked=true")) == [dead.pk]
    assert ids(client.get("/api/v1/api-keys/?revoked=false")) == [live.pk]
    assert ids(client.get("/api/v1/api-keys/?tenant=acme")) == [live.pk, dead.pk]
    response = client.get("/api/v1/api-keys/?revoked=perhaps")
    assert response.status_code == 400 and list(response.json()) == ["revoked"]


@pytest.mark.parametrize(("role", "status"), [("owner", 201), ("admin", 201), ("operator", 403), ("viewer", 403)])
def test_who_creates_keys(role, status, as_role) -> None:
    response = as_role(role).post("/api/v1/api-keys/", {"tenant": "acme", "name": "ci"}, format="json")
    assert response.status_code == status
    assert ApiKey.objects.filter(name="ci").exists() == (status == 201)


def test_create_answers_the_raw_key_once(as_role, acme, members) -> None:
    client = as_role("admin")
    response = client.post(
        "/api/v1/api-keys/", {"tenant": "acme", "name": "ci", "scopes": ["tools:read", "tools:call"]}, format="json"
    )
    assert response.status_code == 201
    body = response.json()
    raw = body["key"]
    key = ApiKey.objects.get(pk=body["id"])
    assert raw.startswith(f"tbk_{key.prefix}_") and key.key_hash == keys.hash_key(raw)
    assert body["created_by"] == "acme-admin" and body["scopes"] == ["tools:read", "tools:call"]
    principal = authenticate(acme, raw)
    assert principal is not None and principal.scopes == {"tools:read", "tools:call"}
    assert "key" not in client.get(f"/api/v1/api-keys/{key.pk}/").json()
    assert raw not in str(client.get("/api/v1/api-keys/").content)


@pytest.mark.django_db(transaction=True)  # real commits: the change is published after commit
def test_revoke(as_role, acme, make_key) -> None:
    key, raw = make_key(acme)
    before = generation("acme")
    response = as_role("admin").post(f"/api/v1/api-keys/{key.pk}/revoke/")
    assert response.status_code == 200 and response.json()["status"] == "revoked"
    assert authenticate(acme, raw) is None
    # The same catalog change every process (and its open MCP sessions) watches.
    assert generation("acme") == before + 1
    again = as_role("admin").post(f"/api/v1/api-keys/{key.pk}/revoke/")
    assert again.status_code == 200 and again.json()["revoked_at"] == response.json()["revoked_at"]


@pytest.mark.parametrize("role", ["operator", "viewer"])
def test_readers_cannot_revoke_or_edit(role, as_role, acme, make_key) -> None:
    key, _ = make_key(acme)
    assert as_role(role).post(f"/api/v1/api-keys/{key.pk}/revoke/").status_code == 403
    assert as_role(role).patch(f"/api/v1/api-keys/{key.pk}/", {"name": "x"}, format="json").status_code == 403
    key.refresh_from_db()
    assert key.revoked_at is None


def test_update_name_scopes_expiry(as_role, acme, make_key) -> None:
    key, _ = make_key(acme)
    soon = timezone.now() + timedelta(days=7)
    response = as_role("owner").patch(
        f"/api/v1/api-keys/{key.pk}/",
        {"name": "renamed", "scopes": ["a"], "expires_at": soon.isoformat(), "tenant": "globex"},
        format="json",
    )
    assert response.status_code == 200, response.content
    key.refresh_from_db()
    assert (key.name, key.scopes, key.expires_at, key.tenant_id) == ("renamed", ["a"], soon, acme.pk)


def test_keys_cannot_be_deleted(as_role, acme, make_key) -> None:
    key, _ = make_key(acme)
    assert as_role("owner").delete(f"/api/v1/api-keys/{key.pk}/").status_code == 405


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"name": "taken"}, "name", "already has an API key named 'taken'"),
        ({"scopes": ["ok", "bad/scope"]}, "scopes", "Scopes are 1-64 characters"),
        ({"scopes": "tools:read"}, "scopes", "Expected a list"),
        ({"expires_at": "2001-01-01T00:00:00Z"}, "expires_at", "must be in the future"),
        ({"expires_at": "tomorrow"}, "expires_at", "Datetime has wrong format"),
        ({"tenant": "globex"}, "tenant", "There is no tenant with the slug 'globex'"),
        ({"name": ""}, "name", "may not be blank"),
    ],
)
def test_validation_errors_name_the_field(as_role, acme, globex, make_key, data, field, message) -> None:
    make_key(acme, "taken")
    response = as_role("owner").post("/api/v1/api-keys/", {"tenant": "acme", "name": "new", **data}, format="json")
    assert response.status_code == 400
    assert list(response.json()) == [field]
    assert message in str(response.json()[field])
    assert ApiKey.objects.count() == 1
