"""OAuth against live servers: a real uvicorn process (``tests.mcp.conftest.start_server``)
that may reach the local stand-ins of the outside world (an external issuer, an HTTPS host
of client metadata documents), and the tenants and people of the OAuth tests.

Personas: ``oauth-a`` uses the embedded authorization server (member: olivia); ``oauth-b``
trusts only the external issuer and takes no API keys; ``oauth-c`` uses the embedded server
too (member: mallory, who is not a member of oauth-a).
"""

from __future__ import annotations

import io
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.core.management import call_command

from oauth.services import oauth_settings_set, trusted_issuer_save
from tenants.models import Membership
from tenants.services import api_key_create, membership_set, tenant_create
from tests.mcp.conftest import LiveServer, LiveWriter, start_audit_writer, start_server
from tests.oauth.servers import ExternalIssuer, MetadataDocumentHost
from tools_app.catalog.services import access_rule_grant_pattern

PASSWORDS = {"olivia": "olivia-pw-1", "mallory": "mallory-pw-1"}
CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


@dataclass
class OAuthWorld:
    issuer: ExternalIssuer
    documents: MetadataDocumentHost
    keys: dict[str, str] = field(default_factory=dict)


@pytest.fixture(scope="session")
def oauth_world(
    django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OAuthWorld]:
    world = OAuthWorld(ExternalIssuer(), MetadataDocumentHost(tmp_path_factory.mktemp("cimd")))
    with django_db_blocker.unblock():
        call_command("seed_demo", stdout=io.StringIO())  # the demo tools (idempotent; live_world runs it too)
        plain = tenant_create(slug="oauth-plain", name="No OAuth")
        access_rule_grant_pattern(tenant=plain, pattern="tag:demo")
        # Hashed the way the live server (production settings, not the tests' MD5) checks them.
        users = {name: get_user_model().objects.create_user(name, password=None) for name in PASSWORDS}
        for name, user in users.items():
            user.password = PBKDF2PasswordHasher().encode(PASSWORDS[name], PBKDF2PasswordHasher().salt())
            user.save(update_fields=["password"])
        a = tenant_create(slug="oauth-a", name="OAuth Alpha", calls_per_minute=1000)
        b = tenant_create(slug="oauth-b", name="OAuth Beta")
        c = tenant_create(slug="oauth-c", name="OAuth Gamma")
        for tenant in (a, b, c):
            access_rule_grant_pattern(tenant=tenant, pattern="tag:demo")
        oauth_settings_set(tenant=a, changes={"enabled": True})
        oauth_settings_set(tenant=c, changes={"enabled": True})
        oauth_settings_set(tenant=b, changes={"enabled": True, "embedded_server": False})
        b.api_keys_enabled = False
        b.save()
        trusted_issuer_save(tenant=b, fields={"issuer": world.issuer.url, "groups_claim": "groups"})
        membership_set(tenant=a, user=users["olivia"], role=Membership.Role.VIEWER)
        membership_set(tenant=c, user=users["mallory"], role=Membership.Role.VIEWER)
        world.keys["a"] = api_key_create(tenant=a, name="oauth-a key")[1]
        world.keys["b"] = api_key_create(tenant=b, name="oauth-b key")[1]
    yield world
    world.issuer.stop()
    world.documents.stop()


@pytest.fixture(scope="session")
def oauth_audit_writer(oauth_world: OAuthWorld, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveWriter]:
    # Writers share the journal as a consumer group: this one may run beside the MCP tests'.
    writer = start_audit_writer(tmp_path_factory.mktemp("oauth-audit-writer"), "oauth-audit-writer")
    yield writer
    writer.stop()


@pytest.fixture
def orm(django_db_blocker: Any) -> Iterator[None]:
    """Read or write the live database from a test (autocommit, visible to the servers)."""
    with django_db_blocker.unblock():
        yield


def _oauth_server_env(world: OAuthWorld) -> dict[str, str]:
    return {
        # The stand-ins live on loopback, which the SSRF guard otherwise refuses.
        "TOOLBAY_OUTBOUND_ALLOWED_HOSTS": "127.0.0.1",
        "SSL_CERT_FILE": str(world.documents.cert_path),
        "TOOLBAY_OAUTH_JWKS_REFRESH_SECONDS": "0",
        # Each concurrent request of a sync view has its own thread and database connection:
        # close it when the request ends, or a burst of 100 (test_grant_lifecycle) keeps the
        # shared test database's connections taken for a minute.
        "DATABASE_CONN_MAX_AGE": "0",
    }


@pytest.fixture(scope="session")
def oauth_server(
    oauth_world: OAuthWorld, oauth_audit_writer: LiveWriter, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    server = start_server(tmp_path_factory.mktemp("oauth-server"), "oauth-server", _oauth_server_env(oauth_world))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def oauth_server_2(
    oauth_server: LiveServer, tmp_path_factory: pytest.TempPathFactory, oauth_world: OAuthWorld
) -> Iterator[LiveServer]:
    """A second ASGI process beside ``oauth_server`` (same database and Redis): what one
    process does, the other must see. It says it is ``oauth_server`` (``TOOLBAY_PUBLIC_URL``),
    as two processes behind one proxy do, so tokens of one are good on the other."""
    env = {**_oauth_server_env(oauth_world), "TOOLBAY_PUBLIC_URL": oauth_server.url}
    server = start_server(tmp_path_factory.mktemp("oauth-server-2"), "oauth-server-2", env)
    yield server
    server.stop()


def wait_until(check: Callable[[], Any], *, timeout: float = 15.0, what: str = "condition") -> Any:
    """Poll ``check`` until it returns something truthy, or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class Person:
    """Someone at a browser: signs in on Toolbay's login page and answers consent pages, over
    plain HTTP. ``approve`` returns the authorization response's query parameters."""

    def __init__(self, username: str) -> None:
        self.username = username
        self.http = httpx.Client(follow_redirects=False, timeout=30)
        self.consents_seen = 0

    def close(self) -> None:
        self.http.close()

    def _csrf(self, page: httpx.Response) -> str:
        match = CSRF.search(page.text)
        assert match is not None, f"no form on {page.url}: HTTP {page.status_code} {page.text[:300]}"
        return match.group(1)

    def approve(self, url: str, *, decision: str = "approve") -> dict[str, str]:
        origin = "{0.scheme}://{0.netloc}".format(urlsplit(url))
        page = self.http.get(url)
        if page.status_code == 302 and "/oauth/login/" in page.headers["location"]:
            login = urljoin(origin, page.headers["location"])
            form = self.http.get(login)
            next_path = parse_qs(urlsplit(login).query)["next"][0]
            signed_in = self.http.post(
                login,
                data={
                    "csrfmiddlewaretoken": self._csrf(form),
                    "username": self.username,
                    "password": PASSWORDS[self.username],
                    "next": next_path,
                },
                headers={"Referer": login},
            )
            assert signed_in.status_code == 302, signed_in.text[:500]
            page = self.http.get(url)
        if page.status_code == 200:
            self.consents_seen += 1
            self.last_consent_page = page.text
            page = self.http.post(
                url, data={"csrfmiddlewaretoken": self._csrf(page), "decision": decision}, headers={"Referer": url}
            )
        assert page.status_code == 302, f"HTTP {page.status_code}: {page.text[:500]}"
        location = page.headers["location"]
        return {name: values[0] for name, values in parse_qs(urlsplit(location).query).items()}
