"""Authentication: personal access tokens for scripts, the session for browsers."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.utils import timezone
from rest_framework.test import APIClient

from api.models import PersonalAccessToken
from api.services import access_token_create
from tenants import keys

pytestmark = pytest.mark.django_db


def bearer(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def test_anonymous_gets_401_with_a_bearer_challenge(acme) -> None:
    response = APIClient().get("/api/v1/tools/")
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_token_created_through_the_api_is_shown_once_and_stored_hashed(members, as_role) -> None:
    response = as_role("viewer").post("/api/v1/tokens/", {"name": "ci"}, format="json")
    assert response.status_code == 201, response.content
    raw = response.json()["token"]
    assert raw.startswith("tbp_")
    token = PersonalAccessToken.objects.get(pk=response.json()["id"])
    assert token.token_hash == keys.hash_key(raw) and raw not in (token.token_hash, token.prefix)

    shown_again = as_role("viewer").get(f"/api/v1/tokens/{token.pk}/").json()
    assert "token" not in shown_again and shown_again["status"] == "active"

    me = bearer(raw).get("/api/v1/me/")
    assert me.status_code == 200
    assert me.json() == {
        "username": "acme-viewer",
        "is_superuser": False,
        "memberships": [{"tenant": "acme", "role": "viewer"}],
    }
    token.refresh_from_db()
    assert token.last_used_at is not None


def test_token_name_must_be_unique_per_user(members, as_role) -> None:
    as_role("viewer").post("/api/v1/tokens/", {"name": "ci"}, format="json")
    response = as_role("viewer").post("/api/v1/tokens/", {"name": "ci"}, format="json")
    assert response.status_code == 400
    assert "already have a token named 'ci'" in response.json()["name"][0]
    assert as_role("owner").post("/api/v1/tokens/", {"name": "ci"}, format="json").status_code == 201


def test_token_expiry_must_be_in_the_future(members, as_role) -> None:
    past = (timezone.now() - timedelta(days=1)).isoformat()
    response = as_role("viewer").post("/api/v1/tokens/", {"name": "ci", "expires_at": past}, format="json")
    assert response.status_code == 400
    assert response.json() == {"expires_at": ["The expiry must be in the future."]}


@pytest.mark.parametrize("problem", ["revoked", "expired", "inactive user", "garbled", "wrong secret"])
def test_unusable_tokens_are_refused_alike(members, problem) -> None:
    user = members["admin"]
    token, raw = access_token_create(user=user, name="ci")
    if problem == "revoked":
        token.revoked_at = timezone.now()
        token.save()
    elif problem == "expired":
        PersonalAccessToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    elif problem == "inactive user":
        user.is_active = False
        user.save()
    elif problem == "garbled":
        raw = raw.replace("tbp_", "tbp")
    else:
        raw = raw[:-4] + "AAAA"
    response = bearer(raw).get("/api/v1/tools/")
    assert response.status_code == 401
    assert response.json() == {"detail": "Invalid, expired or revoked access token."}


def test_mcp_api_keys_are_not_api_credentials(acme, make_key) -> None:
    _, raw = make_key(acme)
    assert bearer(raw).get("/api/v1/tools/").status_code == 401


def test_revoked_token_stops_working(members, as_role) -> None:
    client = as_role("viewer")
    created = client.post("/api/v1/tokens/", {"name": "ci"}, format="json").json()
    assert bearer(created["token"]).get("/api/v1/me/").status_code == 200
    revoked = client.post(f"/api/v1/tokens/{created['id']}/revoke/")
    assert revoked.status_code == 200 and revoked.json()["status"] == "revoked"
    assert bearer(created["token"]).get("/api/v1/me/").status_code == 401


def test_a_token_can_revoke_itself(members) -> None:
    token, raw = access_token_create(user=members["viewer"], name="ci")
    assert bearer(raw).post(f"/api/v1/tokens/{token.pk}/revoke/").status_code == 200
    assert bearer(raw).get("/api/v1/me/").status_code == 401


def test_tokens_of_other_users_do_not_exist(members, as_role) -> None:
    token, _ = access_token_create(user=members["owner"], name="ci")
    viewer = as_role("viewer")
    assert viewer.get("/api/v1/tokens/").json()["results"] == []
    assert viewer.get(f"/api/v1/tokens/{token.pk}/").status_code == 404
    assert viewer.post(f"/api/v1/tokens/{token.pk}/revoke/").status_code == 404
    token.refresh_from_db()
    assert token.revoked_at is None


def test_session_writes_need_the_csrf_token(members) -> None:
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(members["owner"])
    assert client.get("/api/v1/tools/").status_code == 200
    response = client.post("/api/v1/tokens/", {"name": "ci"}, format="json")
    assert response.status_code == 403
    assert "CSRF" in response.json()["detail"]


def test_token_requests_need_no_csrf_token(members) -> None:
    _, raw = access_token_create(user=members["owner"], name="ci")
    client = APIClient(enforce_csrf_checks=True)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert client.post("/api/v1/tokens/", {"name": "other"}, format="json").status_code == 201


def test_create_access_token_command_prints_the_token_last(members) -> None:
    out = StringIO()
    call_command("create_access_token", "acme-owner", "--name", "deploy", stdout=out)
    raw = out.getvalue().strip().splitlines()[-1]
    assert raw.startswith("tbp_")
    assert bearer(raw).get("/api/v1/me/").json()["username"] == "acme-owner"


def test_create_access_token_command_errors(db) -> None:
    with pytest.raises(CommandError, match="No user named 'nobody'"):
        call_command("create_access_token", "nobody", "--name", "x", stdout=StringIO())
    get_user_model().objects.create_user("someone")
    with pytest.raises(CommandError, match="time zone"):
        call_command("create_access_token", "someone", "--name", "x", "--expires-at", "2030-01-01", stdout=StringIO())


def test_tokens_with_control_characters_are_refused(members) -> None:
    _, raw = access_token_create(user=members["viewer"], name="ci")
    assert bearer(raw[:10] + "\x00" + raw[11:]).get("/api/v1/me/").status_code == 401
