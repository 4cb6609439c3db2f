"""Signed caller assertions: an HTTP tool's API receives a JWT saying which tenant, subject,
tool and call it serves; the API here (a real HTTP server in the test process) verifies it
against the JWKS Toolbay publishes, as any API would (it keeps the key set and fetches it
again when an assertion names a key it does not know), and answers with what it verified."""

from __future__ import annotations

import asyncio
import io
import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import httpx2
import pytest
from django.conf import settings
from django.core.management import call_command
from django.utils import timezone
from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import ECKey, KeySet
from joserfc.jws import extract_compact
from joserfc.jwt import JWTClaimsRegistry
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client

from audit.models import Invocation
from oauth.models import SigningKey
from tenants.models import ApiKey, Tenant
from tests.connections.conftest import TENANT, ConnWorld
from tests.mcp.live import free_port
from tests.poll import wait_for
from tools_app.catalog.models import Tool
from tools_app.catalog.services import catalog_entry_create

pytestmark = pytest.mark.live


class _Api(BaseHTTPRequestHandler):
    jwks_url = ""
    issuer = ""
    audience = ""
    jwks: dict[str, Any] = {"keys": []}
    fetches = 0
    received: list[str] = []

    @classmethod
    def key_set(cls, token: str) -> KeySet:
        kid = extract_compact(token.encode()).headers().get("kid")
        if kid not in {key.get("kid") for key in cls.jwks["keys"]}:
            cls.jwks = httpx.get(cls.jwks_url, timeout=5).json()
            cls.fetches += 1
        return KeySet.import_key_set(cls.jwks)  # type: ignore[arg-type]

    def do_GET(self) -> None:
        token = self.headers.get("Toolbay-Caller-Assertion", "")
        self.received.append(token)
        try:
            keys = self.key_set(token)
            claims = jwt.decode(token, keys, algorithms=["ES256"]).claims
            JWTClaimsRegistry(
                iss={"essential": True, "value": self.issuer},
                aud={"essential": True, "value": self.audience},
                exp={"essential": True},
                sub={"essential": True},
            ).validate(claims)
            status, body = 200, {"verified": claims}
        except (JoseError, ValueError) as exc:
            status, body = 401, {"error": type(exc).__name__}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture(scope="module")
def caller_api(conn_world: ConnWorld, django_db_blocker: Any) -> Iterator[str]:
    port = free_port()
    audience = f"http://127.0.0.1:{port}"
    _Api.jwks_url = f"{conn_world.server.url}/connect/{TENANT}/jwks"
    _Api.issuer = f"{conn_world.server.url}/connect/{TENANT}"
    _Api.audience = audience
    server = ThreadingHTTPServer(("127.0.0.1", port), _Api)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    with django_db_blocker.unblock():
        catalog_entry_create(
            model=Tool,
            tenant=Tenant.objects.get(slug=TENANT),
            fields={
                "name": "whocalls",
                "description": "What the API verified about its caller.",
                "input_schema": {"type": "object", "properties": {}},
                "backend_kind": "http",
                "backend_config": {"method": "GET", "url": f"{audience}/whocalls", "caller_assertion": {}},
                "read_only_hint": True,
                "tags": ["conn"],
            },
        )
    yield audience
    server.shutdown()
    server.server_close()


async def _call(world: ConnWorld, person: str) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {world.keys[person]}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        Client(streamable_http_client(world.endpoint, http_client=http), mode="auto") as client,
    ):
        result = await client.call_tool("whocalls", {})
    assert result.is_error is False, result.content
    return dict(json.loads(result.content[0].text)["verified"])


def test_the_api_verifies_who_calls_against_the_published_keys(
    conn_world: ConnWorld, caller_api: str, django_db_blocker: Any
) -> None:
    first = asyncio.run(_call(conn_world, "alice"))
    second = asyncio.run(_call(conn_world, "alice"))
    bobs = asyncio.run(_call(conn_world, "bob"))
    with django_db_blocker.unblock():
        tenant = Tenant.objects.get(slug=TENANT)
        alice_key = ApiKey.objects.get(tenant=tenant, created_by__username="alice")
    assert first["sub"] == f"{tenant.pk}:key:{alice_key.pk}"
    assert (first["tenant"], first["tool"], first["aud"]) == (TENANT, "whocalls", caller_api)
    assert first["exp"] - first["iat"] <= 60
    assert first["call_id"] and first["call_id"] != second["call_id"]  # each call its own
    assert bobs["sub"] != first["sub"]
    # The assertion's call id is the call's invocation row's: the API's logs and Toolbay's join.
    with django_db_blocker.unblock():
        wait_for(
            lambda: Invocation.objects.filter(call_id=first["call_id"], tool_name="whocalls").exists(),
            message="the invocation row of the asserted call",
        )
    # A key that is not the tenant's is refused by the API: the check above is a real one.
    stranger = ECKey.generate_key(parameters={"kid": "not-the-tenants"})
    forged = jwt.encode({"alg": "ES256", "kid": "not-the-tenants"}, {**first}, stranger)
    answer = httpx.get(f"{caller_api}/whocalls", headers={"Toolbay-Caller-Assertion": forged}, timeout=5)
    assert answer.status_code == 401


def _kid(token: str) -> str:
    return str(extract_compact(token.encode()).headers()["kid"])


def test_assertions_verify_across_a_signing_key_rotation(
    conn_world: ConnWorld, caller_api: str, django_db_blocker: Any
) -> None:
    asyncio.run(_call(conn_world, "alice"))
    old = _Api.received[-1]
    fetches = _Api.fetches
    with django_db_blocker.unblock():
        output = io.StringIO()
        call_command("oauth_rotate_signing_key", "--tenant", TENANT, stdout=output)
        new_kid = output.getvalue().split("new signing key ")[1].split()[0]
    assert new_kid != _kid(old)
    # The overlap: the JWKS shows the retired key beside the one that signs now.
    published = {key["kid"] for key in httpx.get(_Api.jwks_url, timeout=5).json()["keys"]}
    assert {_kid(old), new_kid} <= published
    # An assertion the old key signed still verifies (the API's key set has not changed)...
    answer = httpx.get(f"{caller_api}/whocalls", headers={"Toolbay-Caller-Assertion": old}, timeout=5)
    assert answer.status_code == 200 and _Api.fetches == fetches
    # ...and the next call's is signed with the new key, which the API fetches once, by its kid.
    verified = asyncio.run(_call(conn_world, "bob"))
    assert _kid(_Api.received[-1]) == new_kid and verified["tenant"] == TENANT
    assert _Api.fetches == fetches + 1
    # Once nothing the old key signed can still be good, it leaves the JWKS, and an API that
    # reads the JWKS again refuses what it signed.
    lifetime = max(settings.TOOLBAY_OAUTH_ACCESS_TOKEN_SECONDS, 60) + settings.TOOLBAY_OAUTH_CLOCK_SKEW_SECONDS
    with django_db_blocker.unblock():
        SigningKey.objects.filter(kid=_kid(old)).update(retired_at=timezone.now() - timedelta(seconds=lifetime + 1))
    published = {key["kid"] for key in httpx.get(_Api.jwks_url, timeout=5).json()["keys"]}
    assert _kid(old) not in published and new_kid in published
    _Api.jwks = {"keys": []}  # an API that starts afresh
    refused = httpx.get(f"{caller_api}/whocalls", headers={"Toolbay-Caller-Assertion": old}, timeout=5)
    assert refused.status_code == 401
    assert asyncio.run(_call(conn_world, "alice"))["tenant"] == TENANT
