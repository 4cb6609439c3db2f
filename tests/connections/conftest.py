"""Per-user connections against a real, independent OpenID provider (panva's oidc-provider on
loopback, one for the package's modules) and two real Toolbay server processes.

Personas: tenant ``conn-a``; its members alice and bob sign in to Toolbay with a password and
at the provider as themselves; each has an API key of their own (the MCP principal). The
tool ``whoami`` is an HTTP tool whose backend is the provider's userinfo endpoint: it answers
with the ``sub`` of whatever bearer token Toolbay sent.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.core.management import call_command
from joserfc.jwk import RSAKey
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client

from tenants.models import Membership, Tenant
from tenants.services import api_key_create, membership_set, tenant_create
from tests.mcp.live import LiveServer, free_port, journal_drained, start_audit_writer, start_server, stop_together
from tests.poll import wait_for
from tools_app.catalog.models import Tool
from tools_app.catalog.services import access_rule_grant_pattern, catalog_entry_create

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
MODULE_DIR = ROOT / ".conf" / "oidc-provider"
INSTALLER = ROOT / "tests" / "staff_auth" / "install_oidc_provider.sh"
TENANT = "conn-a"
BROKER_PREFIX = "connections:"
PROVIDER = "idp"
EXCHANGE_AUDIENCE = "https://upstream.example/mcp"
# The audience of the tokens MCP clients present to Toolbay when the tenant's users sign in at
# the IdP (the tenant trusts it as an issuer in test_upstream_user_credential).
TOOLBAY_AUDIENCE = "https://toolbay.test/mcp/conn-a"
CLIENT_ID = "toolbay-connections"
CLIENT_SECRET = "connections-client-secret-Zq7Kx2Vb9Lm4Np8Rt3Wy"
# The machine client of the OpenAPI tests (client credentials), and the provider they register
# only after importing (the expected name of the scheme "elsewhere" of source "crm").
MACHINE_CLIENT_ID = "crm-machine"
MACHINE_CLIENT_SECRET = "crm-machine-client-secret-Hs8Qw3Zr6Tn1Vb5K"
API_SCOPE = "contacts:read"
LATER_PROVIDER = "crm-elsewhere"
# The upstream MCP server's own client at the IdP: it introspects the tokens it is sent.
UPSTREAM_CLIENT_ID = "upstream-mcp"
UPSTREAM_CLIENT_SECRET = "upstream-client-secret-Hc5Tn8Qw2Ej6Ry1Uk9Za"
PASSWORDS = {"alice": "alice-password-0fK2", "bob": "bob-password-7hQ1"}
ACCOUNTS = {"alice": {"name": "Alice"}, "bob": {"name": "Bob"}}


@dataclass
class Idp:
    issuer: str
    process: subprocess.Popen[bytes]

    def url(self, path: str) -> str:
        return self.issuer + path


@dataclass
class ConnWorld:
    idp: Idp
    server: LiveServer
    other_server: LiveServer
    keys: dict[str, str] = field(default_factory=dict)
    log_paths: list[Path] = field(default_factory=list)
    # Every token and secret a module's flows produced, and every tool answer a client got: the
    # secrets scan (test_connect_flow, last) looks for them everywhere.
    seen_secrets: set[str] = field(default_factory=lambda: {CLIENT_SECRET, MACHINE_CLIENT_SECRET})
    answers: list[str] = field(default_factory=list)

    @property
    def endpoint(self) -> str:
        return self.server.endpoint(TENANT)

    def endpoints(self) -> list[str]:
        return [self.server.endpoint(TENANT), self.other_server.endpoint(TENANT)]

    @contextlib.asynccontextmanager
    async def sdk_client(self, person: str, mode: str, endpoint: str = "", **options: Any) -> AsyncIterator[Client]:
        """The official SDK's client as ``person`` (their API key), on ``endpoint`` (default:
        the first server's)."""
        headers = {"Authorization": f"Bearer {self.keys[person]}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as http,
            Client(streamable_http_client(endpoint or self.endpoint, http_client=http), mode=mode, **options) as client,
        ):
            yield client

    def texts(self) -> str:
        """Everything the processes logged (the secrets scan reads it)."""
        return "\n".join(path.read_text(errors="replace") for path in self.log_paths if path.exists())


def _start_idp(workdir: Path, toolbay_url: str) -> tuple[Idp, Path]:
    if shutil.which("node") is None:
        pytest.skip("Node.js is not installed: the connection tests need it to run oidc-provider")
    install = subprocess.run([str(INSTALLER)], capture_output=True, text=True, timeout=300)
    if install.returncode != 0:
        pytest.skip(f"npm could not install oidc-provider: {install.stderr.strip()[-500:]}")
    port = free_port()
    issuer = f"http://127.0.0.1:{port}"
    key = RSAKey.generate_key(2048, parameters={"kid": "conn-idp-key", "alg": "RS256", "use": "sig"})
    config = {
        "issuer": issuer,
        "port": port,
        "module_dir": str(MODULE_DIR),
        "accounts": ACCOUNTS,
        "jwks": {"keys": [key.as_dict(private=True)]},
        "access_token_seconds": 600,
        "exchange_audiences": [EXCHANGE_AUDIENCE, TOOLBAY_AUDIENCE],
        "api_scopes": [API_SCOPE],
        "clients": [
            {
                "client_id": CLIENT_ID,
                "client_secret": CLIENT_SECRET,
                "redirect_uris": [
                    f"{toolbay_url}/connect/{TENANT}/{PROVIDER}/callback",
                    f"{toolbay_url}/connect/{TENANT}/{LATER_PROVIDER}/callback",
                ],
                "grant_types": [
                    "authorization_code",
                    "refresh_token",
                    "client_credentials",
                    "urn:ietf:params:oauth:grant-type:token-exchange",
                ],
                "response_types": ["code"],
            },
            {
                "client_id": MACHINE_CLIENT_ID,
                "client_secret": MACHINE_CLIENT_SECRET,
                "grant_types": ["client_credentials"],
                "redirect_uris": [],
                "response_types": [],
                "scope": API_SCOPE,
            },
            {
                "client_id": UPSTREAM_CLIENT_ID,
                "client_secret": UPSTREAM_CLIENT_SECRET,
                "grant_types": ["client_credentials"],
                "response_types": [],
                "redirect_uris": [],
            },
        ],
    }
    (workdir / "idp.json").write_text(json.dumps(config))
    log_path = workdir / "idp.log"
    process = subprocess.Popen(
        ["node", str(HERE / "oidc_provider.mjs"), str(workdir / "idp.json")],
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
    )

    def discovery_answers() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"oidc-provider exited: {log_path.read_text()}")
        return httpx.get(f"{issuer}/.well-known/openid-configuration", timeout=2).status_code == 200

    wait_for(discovery_answers, timeout=20, ignore=(httpx.TransportError,), message="oidc-provider did not start")
    return Idp(issuer, process), log_path


def _people() -> dict[str, Any]:
    users = {}
    for name, password in PASSWORDS.items():
        user = get_user_model().objects.create_user(name, password=None)
        # Hashed the way the live server (production settings) checks passwords.
        user.password = PBKDF2PasswordHasher().encode(password, PBKDF2PasswordHasher().salt())
        user.save(update_fields=["password"])
        users[name] = user
    return users


@pytest.fixture(scope="package")
def conn_world(
    django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ConnWorld]:
    workdir = tmp_path_factory.mktemp("connections")
    toolbay_port = free_port()
    toolbay_url = f"http://127.0.0.1:{toolbay_port}"
    idp, idp_log = _start_idp(workdir, toolbay_url)
    with django_db_blocker.unblock():
        tenant = tenant_create(slug=TENANT, name="Connections Alpha", calls_per_minute=1000)
        users = _people()
        keys = {}
        for name, user in users.items():
            membership_set(tenant=tenant, user=user, role=Membership.Role.VIEWER)
            keys[name] = api_key_create(tenant=tenant, name=f"{name}'s key", created_by=user)[1]
        os.environ["CONN_TEST_CLIENT_SECRET"] = CLIENT_SECRET
        output = io.StringIO()
        call_command(
            "add_provider",
            PROVIDER,
            "--tenant",
            TENANT,
            "--issuer",
            idp.issuer,
            "--client-id",
            CLIENT_ID,
            "--client-secret-env",
            "CONN_TEST_CLIENT_SECRET",
            "--scope",
            "openid",
            "--scope",
            "profile",
            "--display-name",
            "Test IdP",
            "--base-url",
            toolbay_url,
            "--no-check",  # this process's SSRF guard refuses loopback; the server's does not
            stdout=output,
        )
        assert output.getvalue().splitlines()[-1] == f"{toolbay_url}/connect/{TENANT}/{PROVIDER}/callback"
        catalog_entry_create(
            model=Tool,
            tenant=tenant,
            fields={
                "name": "whoami",
                "description": "Who the provider says the bearer is.",
                "input_schema": {"type": "object", "properties": {}},
                "backend_kind": "http",
                "backend_config": {
                    "method": "GET",
                    "url": f"{idp.issuer}/me",
                    "auth": {"type": "connection", "provider": PROVIDER},
                },
                "read_only_hint": True,
                "idempotent_hint": True,
                "tags": ["conn"],
            },
        )
        access_rule_grant_pattern(tenant=tenant, pattern="tag:conn")
    env = {
        "TOOLBAY_PUBLIC_URL": toolbay_url,
        "TOOLBAY_OUTBOUND_ALLOWED_HOSTS": "127.0.0.1",
        "DATABASE_CONN_MAX_AGE": "0",
        # Background calls go to this world's worker only: another suite's workers, started
        # earlier and without this world's settings, must not take them.
        "CELERY_BROKER_KEY_PREFIX": BROKER_PREFIX,
    }
    server = start_server(workdir, "conn-server", env, port=toolbay_port)
    # A second process behind the same public URL, as behind a proxy: refreshes meet across them.
    other = start_server(workdir, "conn-server-2", env)
    # Invocation rows reach the database (writers share the journal as a consumer group).
    writer = start_audit_writer(workdir, "conn-audit-writer")
    world = ConnWorld(idp, server, other, keys, [idp_log, server.log_path, other.log_path, writer.log_path])
    try:
        yield world
    finally:
        try:
            wait_for(journal_drained, message="the journal to drain before the tenant goes")
        finally:
            stop_together([server.process, other.process, writer.process], grace=10)
        idp.process.terminate()
        idp.process.wait(10)
        with django_db_blocker.unblock():
            Tenant.objects.filter(slug=TENANT).delete()
            get_user_model().objects.filter(username__in=list(PASSWORDS)).delete()


@pytest.fixture
def orm(django_db_blocker: Any) -> Iterator[None]:
    with django_db_blocker.unblock():
        yield
