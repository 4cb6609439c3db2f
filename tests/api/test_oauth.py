"""The v1 API's OAuth resources: settings, trusted issuers, pre-registered clients and
consents, per role and never across tenants."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model

from oauth.models import Grant, OAuthClient, TenantOAuth, TrustedIssuer
from oauth.server.clients import hash_secret

ISSUER = "https://idp.example.com/realms/acme"


# "!" is outside the sealed text's alphabet (Fernet tokens are URL-safe base64), so the
# check below cannot match by chance (a short secret like "s3" did, once in a full run).
SECRET = "issuer-secret!s3"


def test_admins_turn_oauth_on_and_trust_an_issuer(as_role, acme):
    api = as_role("admin")
    answer = api.put("/api/v1/oauth-settings/acme/", {"enabled": True, "list_scope": "mcp.list"}, format="json")
    assert answer.status_code == 200, answer.content
    assert answer.json()["enabled"] is True and answer.json()["call_scope"] == "tools:call"
    assert TenantOAuth.objects.get(tenant=acme).list_scope == "mcp.list"

    made = api.post(
        "/api/v1/trusted-issuers/",
        {"tenant": "acme", "issuer": ISSUER, "validation": "introspection", "client_id": "rs", "client_secret": SECRET},
        format="json",
    )
    assert made.status_code == 201, made.content
    body = made.json()
    assert body["has_client_secret"] is True and "client_secret" not in body
    row = TrustedIssuer.objects.get(pk=body["id"])
    assert row.client_secret_sealed and SECRET not in row.client_secret_sealed
    assert as_role("viewer").get("/api/v1/trusted-issuers/").json()["results"][0]["issuer"] == ISSUER
    assert as_role("viewer").patch(f"/api/v1/trusted-issuers/{row.pk}/", {"enabled": False}).status_code == 403


def test_other_tenants_see_nothing(as_role, acme, globex_admin, client_for):
    as_role("admin").put("/api/v1/oauth-settings/acme/", {"enabled": True}, format="json")
    outsider = client_for(globex_admin)
    assert outsider.get("/api/v1/oauth-settings/acme/").status_code == 404
    assert outsider.put("/api/v1/oauth-settings/acme/", {"enabled": False}, format="json").status_code == 404
    assert outsider.get("/api/v1/oauth-settings/").json()["results"] == []
    made = outsider.post("/api/v1/trusted-issuers/", {"tenant": "acme", "issuer": ISSUER}, format="json")
    assert made.status_code == 400  # acme is not a tenant they can name


def test_preregistered_client_secret_is_said_once(as_role, acme):
    api = as_role("owner")
    made = api.post(
        "/api/v1/oauth-clients/",
        {"tenant": "acme", "client_name": "CI bot", "redirect_uris": ["https://ci.example/cb"], "public": False},
        format="json",
    )
    assert made.status_code == 201, made.content
    secret = made.json()["client_secret"]
    client = OAuthClient.objects.get(client_id=made.json()["client_id"])
    assert client.secret_hash == hash_secret(secret) and client.token_endpoint_auth_method == "client_secret_basic"
    assert "client_secret" not in api.get(f"/api/v1/oauth-clients/{client.pk}/").json()
    bad = api.post(
        "/api/v1/oauth-clients/",
        {"tenant": "acme", "client_name": "x", "redirect_uris": ["http://evil.example/cb"]},
        format="json",
    )
    assert bad.status_code == 400 and "loopback" in str(bad.json())


def test_admins_revoke_members_consents(as_role, members, acme):
    client = OAuthClient.objects.create(tenant=acme, client_id="c1", kind="preregistered", redirect_uris=[])
    grant = Grant.objects.create(tenant=acme, user=members["viewer"], client=client, scope="tools:list")
    listed = as_role("operator").get("/api/v1/oauth-grants/").json()["results"]
    assert [(g["user"], g["client_id"]) for g in listed] == [("acme-viewer", "c1")]
    assert as_role("operator").post(f"/api/v1/oauth-grants/{grant.pk}/revoke/").status_code == 403
    answer: Any = as_role("admin").post(f"/api/v1/oauth-grants/{grant.pk}/revoke/")
    assert answer.status_code == 200 and answer.json()["revoked_at"]
    assert Grant.objects.get(pk=grant.pk).revoked_at is not None
    assert get_user_model().objects.filter(username="acme-viewer").exists()
