"""Signed caller assertions: an HTTP tool's API receives a JWT saying which tenant, subject,
tool and call it serves; the API here (a real HTTP server in the test process) verifies it
against the JWKS Toolbay publishes, as any API would, and answers with what it verified."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import httpx2
import pytest
from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import ECKey, KeySet
from joserfc.jwt import JWTClaimsRegistry
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client

from audit.models import Invocation
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

    def do_GET(self) -> None:
        token = self.headers.get("Toolbay-Caller-Assertion", "")
        try:
            keys = KeySet.import_key_set(httpx.get(self.jwks_url, timeout=5).json())
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
