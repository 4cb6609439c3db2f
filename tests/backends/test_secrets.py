"""Backend secrets: encrypted at rest, never shown, logged or echoed; key rotation."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from io import StringIO

import pytest
from cryptography.fernet import Fernet
from django.apps import apps
from django.contrib.admin.models import LogEntry
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client
from rest_framework.test import APIClient

from tests.backends.calls import call, text_of
from tools_app.backends import vault
from tools_app.backends.models import BackendSecret
from tools_app.backends.vault import secret_set, unseal

RAW = "sk-live-7f3a9c2e5b1d4e8f"


@pytest.fixture
def superuser_client(db):
    user = get_user_model().objects.create_superuser("root", password="pw")
    client = Client()
    client.force_login(user)
    return client


def _row_text(secret: BackendSecret) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM tools_app_backendsecret WHERE id = %s", [secret.pk])
        return " ".join(str(value) for value in cursor.fetchone())


def test_the_database_row_holds_only_ciphertext(db):
    secret = secret_set(tenant=None, name="stripe", value=RAW, description="Stripe live key")
    row = _row_text(secret)
    assert RAW not in row
    assert secret.ciphertext.startswith("gAAAAA")  # a Fernet token
    assert unseal(secret.ciphertext) == RAW
    assert RAW not in repr(secret) and RAW not in str(secret)


def test_the_admin_stores_the_value_encrypted_and_never_shows_it(superuser_client, settings):
    added = superuser_client.post(
        "/admin/tools_app/backendsecret/add/",
        {"name": "stripe", "description": "live key", "value": RAW, "tenant": ""},
    )
    assert added.status_code == 302, added.content.decode()
    secret = BackendSecret.objects.get(name="stripe")
    assert unseal(secret.ciphertext) == RAW

    pages = [
        superuser_client.get("/admin/tools_app/backendsecret/"),
        superuser_client.get(f"/admin/tools_app/backendsecret/{secret.pk}/change/"),
        superuser_client.get(f"/admin/tools_app/backendsecret/{secret.pk}/history/"),
        superuser_client.get("/admin/tools_app/backendsecret/add/"),
    ]
    for page in pages:
        assert page.status_code == 200
        assert RAW not in page.content.decode()
        assert secret.ciphertext not in page.content.decode()
    change_page = pages[1].content.decode()
    assert 'type="password"' in change_page and 'name="value"' in change_page
    assert 'value="' + RAW not in change_page

    # Saving without a value keeps it; with one replaces it.
    kept = superuser_client.post(
        f"/admin/tools_app/backendsecret/{secret.pk}/change/",
        {"name": "stripe", "description": "renamed", "value": "", "tenant": ""},
    )
    assert kept.status_code == 302
    secret.refresh_from_db()
    assert unseal(secret.ciphertext) == RAW and secret.description == "renamed"
    superuser_client.post(
        f"/admin/tools_app/backendsecret/{secret.pk}/change/",
        {"name": "stripe", "description": "renamed", "value": "sk-live-rotated-0001", "tenant": ""},
    )
    secret.refresh_from_db()
    assert unseal(secret.ciphertext) == "sk-live-rotated-0001"

    # The admin's own change history names the field, never the value.
    for entry in LogEntry.objects.all():
        assert RAW not in entry.change_message and "sk-live-rotated-0001" not in entry.change_message
        assert RAW not in entry.object_repr


def test_a_secret_is_required_when_added(superuser_client):
    response = superuser_client.post("/admin/tools_app/backendsecret/add/", {"name": "empty", "value": ""})
    assert response.status_code == 200
    assert "Enter the value to store." in response.content.decode()
    assert not BackendSecret.objects.exists()


def test_tenant_admins_see_only_their_tenants_secrets(acme, globex, acme_admin_client):
    own = secret_set(tenant=acme, name="acme-key", value="acme-value-1234")
    foreign = secret_set(tenant=globex, name="globex-key", value="globex-value-1234")
    listing = acme_admin_client.get("/admin/tools_app/backendsecret/").content.decode()
    assert "acme-key" in listing and "globex-key" not in listing
    assert acme_admin_client.get(f"/admin/tools_app/backendsecret/{own.pk}/change/").status_code == 200
    assert acme_admin_client.get(f"/admin/tools_app/backendsecret/{foreign.pk}/change/").status_code == 404


def test_secrets_reach_neither_logs_nor_error_results_nor_the_api(api, allow, http_tool, caplog, superuser_client):
    allow(api.host_port)
    caplog.set_level(logging.DEBUG)
    secret_set(tenant=None, name="api-token", value=RAW)
    ok = http_tool("whoami", {"url": f"{api.origin}/whoami", "auth": {"type": "bearer", "secret": "api-token"}})
    reflecting = http_tool(
        "reflecting", {"url": f"{api.origin}/reflect-auth", "auth": {"type": "bearer", "secret": "api-token"}}
    )
    basic = http_tool(
        "reflecting_basic",
        {"url": f"{api.origin}/reflect-auth", "auth": {"type": "basic", "secret": "api-token", "username": "ada"}},
    )
    assert call(ok).is_error is False
    assert api.requests[0].headers["authorization"] == f"Bearer {RAW}"  # it was really sent

    # An API that echoes the credential in its error: the result shows it redacted.
    echoed = call(reflecting)
    assert echoed.is_error
    assert text_of(echoed) == f"HTTP 401 Unauthorized from {api.origin}/reflect-auth: bad credential: Bearer [redacted]"
    echoed_basic = call(basic)
    assert text_of(echoed_basic).endswith("bad credential: Basic [redacted]")

    # Every admin and API view of the tools and the admin test call.
    pages = [
        superuser_client.get("/admin/tools_app/tool/").content,
        superuser_client.get(f"/admin/tools_app/tool/{ok.pk}/change/").content,
        superuser_client.post(f"/admin/tools_app/tool/{reflecting.pk}/test-call/", {"arguments": "{}"}).content,
    ]
    rest = APIClient()
    rest.force_login(get_user_model().objects.get(username="root"))
    pages += [
        rest.get("/api/v1/tools/").content,
        rest.get(f"/api/v1/tools/{ok.pk}/").content,
        rest.post(f"/api/v1/tools/{reflecting.pk}/test-call/", {"arguments": {}}, format="json").content,
    ]
    assert b"[redacted]" in pages[2] and b"[redacted]" in pages[5]
    for content in pages:
        assert RAW.encode() not in content

    assert RAW not in caplog.text
    _assert_nowhere_in_the_database(RAW)


def _assert_nowhere_in_the_database(raw: str) -> None:
    """Every row of every model (secrets, tools, audit events, invocations, admin history…)."""
    for model in apps.get_models():
        for row in model._base_manager.values_list():
            assert raw not in " ".join(map(str, row)), f"{model._meta.label} holds the raw secret"


def test_the_raw_secret_is_in_no_table_and_no_audit_row(superuser_client, api, allow, http_tool):
    allow(api.host_port)
    superuser_client.post(
        "/admin/tools_app/backendsecret/add/", {"name": "stripe", "description": "", "value": RAW, "tenant": ""}
    )
    secret = BackendSecret.objects.get(name="stripe")
    superuser_client.post(
        f"/admin/tools_app/backendsecret/{secret.pk}/change/",
        {"name": "stripe", "description": "changed", "value": RAW + "-v2", "tenant": ""},
    )
    tool = http_tool("whoami", {"url": f"{api.origin}/reflect-auth", "auth": {"type": "bearer", "secret": "stripe"}})
    superuser_client.post(f"/admin/tools_app/tool/{tool.pk}/test-call/", {"arguments": "{}"})
    _assert_nowhere_in_the_database(RAW)


def test_a_missing_key_gives_a_clear_error_without_the_secret(api, allow, http_tool, settings):
    allow(api.host_port)
    secret_set(tenant=None, name="api-token", value=RAW)
    tool = http_tool("whoami", {"url": f"{api.origin}/whoami", "auth": {"type": "bearer", "secret": "api-token"}})
    settings.TOOLBAY_SECRET_KEYS = [Fernet.generate_key().decode()]  # the key it was sealed with is gone
    vault.clear_cache()
    outcome = call(tool)
    assert outcome.is_error
    assert "secret 'api-token' cannot be decrypted with the configured TOOLBAY_SECRET_KEYS" in text_of(outcome)
    assert api.requests == []


def test_key_rotation(db, settings):
    old = settings.TOOLBAY_SECRET_KEYS[0]
    secrets = [secret_set(tenant=None, name=f"s{i}", value=f"value-{i}-abcdef") for i in range(3)]
    new = Fernet.generate_key().decode()

    settings.TOOLBAY_SECRET_KEYS = [new, old]  # step 1: the new key first, the old one still there
    out = StringIO()
    call_command("rotate_backend_secrets", stdout=out)
    assert "re-encrypted 3 secret(s)" in out.getvalue()

    settings.TOOLBAY_SECRET_KEYS = [new]  # step 3: the old key is gone; everything still opens
    for index, secret in enumerate(secrets):
        secret.refresh_from_db()
        assert unseal(secret.ciphertext) == f"value-{index}-abcdef"
        assert Fernet(new).decrypt(secret.ciphertext.encode()) == f"value-{index}-abcdef".encode()

    # A secret no configured key opens is reported, by name only.
    BackendSecret.objects.filter(pk=secrets[0].pk).update(
        ciphertext=Fernet(Fernet.generate_key()).encrypt(b"x").decode()
    )
    with pytest.raises(CommandError, match=r"1 secret\(s\) cannot be decrypted with any configured key.*s0"):
        call_command("rotate_backend_secrets", stdout=StringIO())


def test_production_refuses_to_start_without_secret_keys():
    env = {k: v for k, v in os.environ.items() if k != "TOOLBAY_SECRET_KEYS"}
    env.update(DEBUG="0", SECRET_KEY="x" * 50)
    result = subprocess.run(
        [sys.executable, "-c", "import mcp_platform.settings"], env=env, capture_output=True, text=True, cwd="."
    )
    assert result.returncode != 0
    assert "TOOLBAY_SECRET_KEYS is not set" in result.stderr

    env["TOOLBAY_SECRET_KEYS"] = "not-a-key"
    result = subprocess.run(
        [sys.executable, "-c", "import mcp_platform.settings"], env=env, capture_output=True, text=True, cwd="."
    )
    assert "TOOLBAY_SECRET_KEYS entry #1 is not a Fernet key" in result.stderr

    env["TOOLBAY_SECRET_KEYS"] = Fernet.generate_key().decode()
    result = subprocess.run(
        [sys.executable, "-c", "import mcp_platform.settings"], env=env, capture_output=True, text=True, cwd="."
    )
    assert result.returncode == 0, result.stderr
