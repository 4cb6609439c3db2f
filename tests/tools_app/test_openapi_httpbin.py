"""An imported API called end to end: httpbin (PyPI) serves on loopback with its own
description (Swagger 2.0, from flasgger), ``import_openapi`` fetches it through the SSRF guard,
and the official SDK client calls the tools through a live Toolbay server, inline and on a
worker.

httpbin's description declares no parameters on ``/anything/{anything}`` and leaves the type of
``/status/{codes}``'s out and ``required`` of ``/base64/{value}``'s (so the import skips them,
naming the place); the test adds a query, a header and a JSON body to the first and completes
the others (as an API owner would) and
imports those operations as well, to carry every kind of argument."""

from __future__ import annotations

import asyncio
import copy
import io
import json
import secrets
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from django.core.management import call_command
from django.test import override_settings
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client

from tenants.services import api_key_create, tenant_create
from tests.mcp.live import LiveServer, LiveWorker, kill_workers, start_server, start_worker, stop_together
from tests.poll import wait_for
from tools_app.catalog.models import Tool
from tools_app.catalog.services import catalog_entry_update

pytestmark = [
    pytest.mark.live,
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]
pytest.importorskip("httpbin")
pytest.importorskip("flasgger")

TENANT = "live-openapi"
SERVE = (
    "import sys; from httpbin import app; from werkzeug.serving import run_simple; "
    "run_simple('127.0.0.1', int(sys.argv[1]), app, threaded=True)"
)


@dataclass
class Httpbin:
    url: str
    host_port: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def requests_to(self, fragment: str) -> int:
        return sum(1 for line in self.log_path.read_text().splitlines() if fragment in line)


@dataclass
class World:
    httpbin: Httpbin
    server: LiveServer
    worker: LiveWorker
    key: str


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def world(django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("httpbin")
    port = _free_port()
    log_path = tmp / "httpbin.log"
    process = subprocess.Popen(
        [sys.executable, "-c", SERVE, str(port)], stdout=log_path.open("wb"), stderr=subprocess.STDOUT
    )
    httpbin = Httpbin(f"http://127.0.0.1:{port}", f"127.0.0.1:{port}", process, log_path)
    wait_for(
        lambda: httpx.get(f"{httpbin.url}/spec.json", timeout=1).status_code == 200,
        timeout=30,
        ignore=(httpx.TransportError,),
        message=lambda: f"httpbin to serve its description; its log:\n{log_path.read_text()}",
    )
    with django_db_blocker.unblock(), override_settings(TOOLBAY_OUTBOUND_ALLOWED_HOSTS=[httpbin.host_port]):
        tenant = tenant_create(slug=TENANT, name="Live OpenAPI")
        _, key = api_key_create(tenant=tenant, name="live openapi key")
        # httpbin's own description, fetched through the SSRF guard; it names httpbin.org as its host.
        out, err = io.StringIO(), io.StringIO()
        spec_url = f"{httpbin.url}/spec.json"
        call_command(
            "import_openapi", spec_url, "--tenant", TENANT, "--prefix", "hb_", "--base-url", httpbin.url,
            "--grant", stdout=out, stderr=err,
        )  # fmt: skip
        assert "created hb_get_uuid  GET /uuid" in out.getvalue()
        # httpbin's description has mistakes; those operations are skipped, naming the place.
        assert "skipped GET /status/{codes}: paths./status/{codes}.get.parameters[0]: " in err.getvalue()
        described = copy.deepcopy(httpx.get(spec_url).json())
        parameters = [
            {"name": "anything", "in": "path", "required": True, "type": "string"},
            {"name": "q", "in": "query", "type": "string", "enum": ["cats", "dogs"]},
            {"name": "X-Probe", "in": "header", "type": "string"},
            {
                "name": "pet",
                "in": "body",
                "required": True,
                "schema": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
                },
            },
        ]
        for method in ("post", "put"):
            described["paths"]["/anything/{anything}"][method]["parameters"] = parameters
        described["paths"]["/status/{codes}"]["get"]["parameters"][0].update(type="string", required=True)
        described["paths"]["/base64/{value}"]["get"]["parameters"][0].update(required=True)
        described_path = tmp / "described.json"
        described_path.write_text(json.dumps(described))
        call_command(
            "import_openapi", str(described_path), "--tenant", TENANT, "--prefix", "hbx_", "--base-url",
            httpbin.url, "--path", "/anything/*", "/status/*", "/base64/*",
            "--grant", stdout=io.StringIO(), stderr=io.StringIO(),
        )  # fmt: skip
        background = Tool.objects.get(tenant=tenant, name="hbx_put_anything_anything")
        catalog_entry_update(entry=background, changes={"execution_mode": "background"})
        for tool in Tool.objects.filter(tenant=tenant):  # these calls change nothing worth asking about
            catalog_entry_update(entry=tool, changes={"confirmation": "none"})
    # Its own broker prefix: the session's other live workers (tests/mcp) must not take these
    # background calls, since only this worker may reach httpbin on loopback.
    env = {
        "TOOLBAY_OUTBOUND_ALLOWED_HOSTS": httpbin.host_port,
        "CELERY_BROKER_KEY_PREFIX": f"openapi-{secrets.token_hex(4)}:",
    }
    server = start_server(tmp, "toolbay-openapi", env)
    worker = start_worker(tmp, "worker-openapi", "toolbay.short,toolbay.long", env)
    yield World(httpbin, server, worker, key)
    kill_workers([worker])
    stop_together([server.process, process], grace=10)


def _client(world: World) -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {world.key}"}, timeout=30)
    return Client(streamable_http_client(world.server.endpoint(TENANT), http_client=http), mode="legacy")


def test_imported_httpbin_tools_are_listed_and_called(world: World) -> None:
    async def scenario() -> None:
        async with _client(world) as client:
            names: list[str] = []
            cursor = None
            while True:  # the live servers page by 3
                page = await client.list_tools(cursor=cursor)
                names += [tool.name for tool in page.tools]
                cursor = page.next_cursor
                if cursor is None:
                    break
            assert {"hb_get_get", "hbx_get_status_codes", "hbx_get_base64_value", "hbx_post_anything_anything"} <= set(
                names
            )
            assert len(names) > 30

            decoded = await client.call_tool("hbx_get_base64_value", {"value": "aGVsbG8gb3BlbmFwaQ=="})
            assert decoded.is_error is False and decoded.content[0].text == "hello openapi"

            echoed = await client.call_tool(
                "hbx_post_anything_anything",
                {"anything": "a b", "q": "cats", "X-Probe": "probe-1", "name": "Rex", "age": 3},
            )
            assert echoed.is_error is False, echoed.content
            body = json.loads(echoed.content[0].text)
            assert body["method"] == "POST" and body["url"].endswith("/anything/a%20b?q=cats")
            assert body["args"] == {"q": "cats"} and body["headers"]["X-Probe"] == "probe-1"
            assert body["json"] == {"name": "Rex", "age": 3}

            teapot = await client.call_tool("hbx_get_status_codes", {"codes": "418"})
            assert teapot.is_error is True and "HTTP 418" in teapot.content[0].text

            for bad in ({"anything": "refused", "q": "birds", "name": "Rex"}, {"anything": "refused", "age": 1}):
                refused = await client.call_tool("hbx_post_anything_anything", bad)
                assert refused.is_error is True and "Invalid arguments" in refused.content[0].text
            # A later good call reaches httpbin; the refused ones never did.
            after = await client.call_tool("hbx_post_anything_anything", {"anything": "after", "name": "Rex"})
            assert after.is_error is False
            wait_for(lambda: world.httpbin.requests_to("/anything/after") == 1, timeout=10)
            assert world.httpbin.requests_to("/anything/refused") == 0

            # The same kind of tool on a worker.
            queued = await client.call_tool(
                "hbx_put_anything_anything", {"anything": "queued", "X-Probe": "bg", "name": "Tom"}
            )
            assert queued.is_error is False, queued.content
            body = json.loads(queued.content[0].text)
            assert body["method"] == "PUT" and body["json"] == {"name": "Tom"} and body["headers"]["X-Probe"] == "bg"

    asyncio.run(scenario())
    wait_for(lambda: b"succeeded" in world.worker.log_path.read_bytes(), timeout=10)
