"""Connection providers and connections without a live server: the add_provider command,
the HTTP backend's settings, the admin (tenant scoping, no token on any page), and the
self-service page (each user sees and removes only their own)."""

from __future__ import annotations

import io
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from audit.models import AuditEvent
from oauth.connections.services import provider_save
from oauth.models import Connection, ConnectionProvider
from oauth.sealing import seal, unseal
from tenants.models import Tenant
from tools_app.backends.base import BackendConfigError
from tools_app.backends.http.backend import check_references, validate_config

ACCESS = "access-token-never-shown-5f1c9e"
REFRESH = "refresh-token-never-shown-77ab20"


def _add(*args: str, env: dict[str, str] | None = None, monkeypatch: Any = None) -> list[str]:
    for name, value in (env or {}).items():
        monkeypatch.setenv(name, value)
    out = io.StringIO()
    call_command("add_provider", *args, stdout=out)
    return out.getvalue().splitlines()


def test_add_provider_seals_the_secret_and_prints_the_redirect_uri_last(acme: Tenant, monkeypatch: Any) -> None:
    lines = _add(
        "github", "--tenant", "acme", "--authorization-endpoint", "https://gh.example.com/login/oauth/authorize",
        "--token-endpoint", "https://gh.example.com/login/oauth/access_token", "--client-id", "Iv1.abc",
        "--client-secret-env", "GH_SECRET", "--scope", "repo", "--scope", "read:user", "--param", "allow_signup=false",
        "--base-url", "https://toolbay.example.com", "--no-check",
        env={"GH_SECRET": "gh-client-secret-123456"}, monkeypatch=monkeypatch,
    )  # fmt: skip
    assert lines[-1] == "https://toolbay.example.com/connect/acme/github/callback"
    provider = ConnectionProvider.objects.get(tenant=acme, name="github")
    assert provider.scopes == ["repo", "read:user"] and provider.extra_authorize_params == {"allow_signup": "false"}
    assert unseal(provider.client_secret_sealed) == "gh-client-secret-123456"
    event = AuditEvent.objects.get(object_type="oauth.ConnectionProvider", object_id=str(provider.pk))
    assert "gh-client-secret-123456" not in str(event.changes) and event.changes["client_secret"] == ["", "(changed)"]
    platform = _add(
        "google", "--issuer", "https://accounts.example.com", "--client-id", "g", "--no-check",
        "--base-url", "https://toolbay.example.com",
    )  # fmt: skip
    assert platform[-1] == "https://toolbay.example.com/connect/_platform/google/callback"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["x", "--tenant", "nope", "--issuer", "https://i.example.com", "--client-id", "c"], "No tenant"),
        (["x", "--client-id", "c"], "Give --issuer"),
        (
            ["x", "--issuer", "https://i.example.com", "--client-id", "c", "--client-secret-env", "UNSET_VAR_9"],
            "not set",
        ),
        (["x", "--issuer", "https://i.example.com", "--client-id", "c", "--param", "novalue"], "KEY=VALUE"),
        (["Bad Name", "--issuer", "https://i.example.com", "--client-id", "c", "--no-check"], "Invalid provider"),
    ],
)
def test_add_provider_refuses_bad_input_clearly(db: Any, args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        call_command("add_provider", *args, stdout=io.StringIO())


def test_http_settings_for_connections_and_assertions(acme: Tenant, globex: Tenant) -> None:
    base = {"method": "GET", "url": "https://api.example.com/me"}
    validate_config({**base, "auth": {"type": "connection", "provider": "github", "scopes": ["repo"]}})
    validate_config({**base, "caller_assertion": {}})
    validate_config({**base, "caller_assertion": {"header": "X-Caller", "audience": "https://api.example.com"}})
    for bad in (
        {"auth": {"type": "connection"}},
        {"auth": {"type": "connection", "provider": "github", "secret": "x"}},
        {"auth": {"type": "connection", "provider": "github", "scopes": "repo"}},
        {"caller_assertion": {"header": "Host"}},
        {"caller_assertion": {"issuer": "x"}},
        {"caller_assertion": True},
    ):
        with pytest.raises(BackendConfigError):
            validate_config({**base, **bad})
    provider_save(tenant=acme, name="github", fields={"client_id": "c", "issuer": "https://gh.example.com"})
    config = {**base, "auth": {"type": "connection", "provider": "github"}}
    check_references(config, tenant_id=acme.pk)
    with pytest.raises(BackendConfigError, match="no connection provider named 'github'"):
        check_references(config, tenant_id=globex.pk)  # another tenant's provider is not there


def _connection(tenant: Tenant, user: Any, provider: ConnectionProvider, label: str) -> Connection:
    return Connection.objects.create(
        tenant=tenant,
        provider=provider,
        subject=f"{tenant.pk}:key:{user.pk}",
        user=user,
        label=label,
        account=f"{label}-at-provider",
        access_token_sealed=seal(ACCESS),
        refresh_token_sealed=seal(REFRESH),
        expires_at=timezone.now() + timedelta(hours=1),
        scopes=["repo"],
    )


def test_admins_see_who_is_connected_in_their_tenant_only_and_never_a_token(
    acme: Tenant, globex: Tenant, acme_admin_client: Client, make_staff: Any
) -> None:
    acme_provider = provider_save(tenant=acme, name="github", fields={"client_id": "c", "issuer": "https://g.example"})
    globex_provider = provider_save(
        tenant=globex, name="gitlab", fields={"client_id": "c", "issuer": "https://l.example"}
    )
    mine = _connection(acme, make_staff("ann"), acme_provider, "ann")
    theirs = _connection(globex, make_staff("gus"), globex_provider, "gus")
    listing = acme_admin_client.get("/admin/oauth/connection/").content.decode()
    assert "ann-at-provider" in listing and "gus-at-provider" not in listing
    page = acme_admin_client.get(f"/admin/oauth/connection/{mine.pk}/change/")
    assert page.status_code == 200 and "ann-at-provider" in page.content.decode()
    for text in (listing, page.content.decode()):
        assert ACCESS not in text and REFRESH not in text and mine.access_token_sealed not in text
    assert acme_admin_client.get(f"/admin/oauth/connection/{theirs.pk}/change/").status_code == 404
    provider_page = acme_admin_client.get(f"/admin/oauth/connectionprovider/{acme_provider.pk}/change/")
    assert "/connect/acme/github/callback" in provider_page.content.decode()
    assert acme_admin_client.get(f"/admin/oauth/connectionprovider/{globex_provider.pk}/change/").status_code == 404


def test_the_self_service_page_shows_and_removes_only_ones_own(acme: Tenant, make_staff: Any) -> None:
    provider = provider_save(tenant=acme, name="github", fields={"client_id": "c", "issuer": "https://g.example"})
    ann, bea = make_staff("ann"), make_staff("bea")
    mine = _connection(acme, ann, provider, "ann")
    hers = _connection(acme, bea, provider, "bea")
    browser = Client()
    assert browser.get("/connect/")["Location"].startswith("/oauth/login/")
    browser.force_login(ann)
    page = browser.get("/connect/").content.decode()
    assert "ann-at-provider" in page and "bea-at-provider" not in page and ACCESS not in page
    # Bea's connection id posted from ann's session is not found, and nothing is removed.
    assert browser.post("/connect/", {"connection": hers.pk}).status_code == 302
    assert Connection.objects.filter(pk=hers.pk).exists() and Connection.objects.filter(pk=mine.pk).exists()


def test_a_connect_link_that_does_not_exist_or_expired_looks_the_same(acme: Tenant, make_staff: Any) -> None:
    provider = provider_save(tenant=acme, name="github", fields={"client_id": "c", "issuer": "https://g.example"})
    from oauth.models import ConnectAttempt

    ann = make_staff("ann")
    expired = ConnectAttempt.objects.create(
        tenant=acme, provider=provider, subject="s", user=ann, expires_at=timezone.now() - timedelta(seconds=1)
    )
    browser = Client()
    browser.force_login(ann)
    gone = browser.get(f"/connect/acme/github/start/{expired.pk}")
    unknown = browser.get("/connect/acme/github/start/not-a-link")
    assert gone.status_code == unknown.status_code == 404
    assert gone.content == unknown.content
    assert browser.get("/connect/acme/github/callback?state=whatever&code=x").status_code == 400
