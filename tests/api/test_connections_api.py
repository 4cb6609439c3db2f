"""The v1 API's connection providers and connections: admins register providers (the secret
write-only), everyone in the tenant sees who is connected (never a token), admins
disconnect; another tenant sees nothing."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth import get_user_model
from django.utils import timezone

from oauth.models import Connection, ConnectionProvider
from oauth.sealing import seal

SECRET = "provider-secret!q7"  # "!" is outside the sealed text's alphabet
TOKEN = "user-access-token!x1"


def test_admins_register_providers_and_see_connections_without_tokens(as_role, acme):
    api = as_role("admin")
    made = api.post(
        "/api/v1/connection-providers/",
        {"tenant": "acme", "name": "github", "issuer": "https://gh.example.com", "client_id": "Iv1",
         "client_secret": SECRET, "scopes": ["repo"]},
        format="json",
    )  # fmt: skip
    assert made.status_code == 201, made.content
    body = made.json()
    assert body["has_client_secret"] is True and "client_secret" not in body
    assert body["redirect_uri"].endswith("/connect/acme/github/callback")
    provider = ConnectionProvider.objects.get(pk=body["id"])
    assert SECRET not in provider.client_secret_sealed
    assert (
        as_role("viewer")
        .post("/api/v1/connection-providers/", {"tenant": "acme", "name": "x", "client_id": "c"}, format="json")
        .status_code
        == 403
    )
    user = get_user_model().objects.create_user("carol")
    connection = Connection.objects.create(
        tenant=acme, provider=provider, subject="s1", user=user, label="carol", account="carol-gh",
        access_token_sealed=seal(TOKEN), expires_at=timezone.now() + timedelta(hours=1),
    )  # fmt: skip
    listing = as_role("viewer").get("/api/v1/connections/")
    assert listing.status_code == 200
    (row,) = listing.json()["results"]
    assert (row["provider"], row["user"], row["account"]) == ("github", "carol", "carol-gh")
    assert TOKEN not in listing.content.decode() and connection.access_token_sealed not in listing.content.decode()
    assert as_role("viewer").delete(f"/api/v1/connections/{connection.pk}/").status_code == 403
    # The provider has no revocation endpoint and cannot be reached: the connection goes anyway.
    provider.issuer = ""
    provider.authorization_endpoint = "https://gh.example.com/authorize"
    provider.token_endpoint = "https://gh.example.com/token"
    provider.save()
    assert api.delete(f"/api/v1/connections/{connection.pk}/").status_code == 204
    assert not Connection.objects.filter(pk=connection.pk).exists()


def test_other_tenants_see_no_providers_or_connections(as_role, acme, globex_admin, client_for):
    made = as_role("admin").post(
        "/api/v1/connection-providers/",
        {"tenant": "acme", "name": "github", "issuer": "https://gh.example.com", "client_id": "Iv1"},
        format="json",
    )
    outsider = client_for(globex_admin)
    assert outsider.get("/api/v1/connection-providers/").json()["results"] == []
    assert outsider.get(f"/api/v1/connection-providers/{made.json()['id']}/").status_code == 404
    assert outsider.get("/api/v1/connections/").json()["results"] == []
    named = outsider.post(
        "/api/v1/connection-providers/", {"tenant": "acme", "name": "x", "client_id": "c"}, format="json"
    )
    assert named.status_code == 400
