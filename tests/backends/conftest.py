"""Fixtures for the backend tests: real HTTP servers on loopback and helpers to call tools.

The servers bind 127.0.0.1 only. The SSRF guard blocks loopback, so a test that wants a
server reachable opens exactly its ``host:port`` through ``TOOLBAY_OUTBOUND_ALLOWED_HOSTS``
(the ``allow`` fixture) — and every other loopback port stays blocked.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.backends.calls import PNG
from tests.backends.packaged import World, live_world
from tools_app.backends import vault
from tools_app.backends.http import netguard
from tools_app.backends.upstream import federation as upstreams
from tools_app.catalog.models import Tool
from tools_app.catalog.services import catalog_entry_create


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes


@dataclass
class LocalApi:
    """A small HTTP API on 127.0.0.1 that records every request it gets."""

    server: ThreadingHTTPServer
    requests: list[Recorded] = field(default_factory=list)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def host_port(self) -> str:
        return f"127.0.0.1:{self.port}"


class _Handler(BaseHTTPRequestHandler):
    api: LocalApi
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, body: bytes, content_type: str = "application/json", **headers: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, value: Any) -> None:
        self._send(status, json.dumps(value).encode())

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        parts = urlsplit(self.path)
        query = parse_qs(parts.query, keep_blank_values=True)
        record = Recorded(self.command, parts.path, query, {k.lower(): v for k, v in self.headers.items()}, body)
        self.api.requests.append(record)
        path = parts.path
        if path.startswith("/users/"):
            self._json(200, {"path": self.path, "query": query})
        elif path == "/echo":
            parsed = json.loads(body) if body else None
            self._json(200, {"method": self.command, "received": parsed})
        elif path == "/whoami":
            self._json(200, {"authenticated": "authorization" in record.headers or "x-api-key" in record.headers})
        elif path.startswith("/status/"):
            code = int(path.rsplit("/", 1)[1])
            text = query.get("body", ["something went wrong " * 60])[0]
            self._send(code, text.encode(), "text/plain; charset=utf-8")
        elif path == "/reflect-auth":
            # A careless API that puts the credential it got into its error message.
            self._send(401, f"bad credential: {record.headers.get('authorization', '')}".encode(), "text/plain")
        elif path == "/slow":
            time.sleep(float(query.get("seconds", ["2"])[0]))  # a slow API, for timeouts (behaviour under test)
            self._json(200, {"slept": True})
        elif path == "/big":
            size = int(query.get("bytes", ["100000"])[0])
            if query.get("chunked"):
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                chunk = b"x" * 1000
                sent = 0
                while sent < size:
                    self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                    sent += len(chunk)
                self.wfile.write(b"0\r\n\r\n")
            else:
                self._send(200, b"x" * size, "text/plain")
        elif path == "/image":
            self._send(200, PNG, "image/png")
        elif path == "/text":
            self._send(200, "plain words, ünïcode".encode(), "text/plain; charset=utf-8")
        elif path == "/pdf":
            self._send(200, b"%PDF-1.4 fake", "application/pdf")
        elif path == "/json-list":
            self._json(200, [1, 2, 3])
        elif path == "/json":
            self._json(200, json.loads(query.get("value", ["{}"])[0]))
        elif path == "/nested":
            self._json(200, {"data": {"items": [{"id": 7}]}, "meta": {"page": 1}})
        elif path == "/redirect":
            status = int(query.get("status", ["302"])[0])
            self._send(status, b"", "text/plain", Location=query["to"][0])
        elif path == "/no-content":
            self.send_response(204)
            self.end_headers()
        else:
            self._json(404, {"error": "no such route"})

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _handle  # noqa: N815 (http.server's names)


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients that hang up early (timeouts, size caps) are what some tests do


def start_local_api() -> LocalApi:
    handler = type("Handler", (_Handler,), {})
    server = _QuietServer(("127.0.0.1", 0), handler)
    api = LocalApi(server)
    handler.api = api
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return api


@pytest.fixture(scope="session")
def _api_servers() -> Iterator[tuple[LocalApi, LocalApi]]:
    servers = (start_local_api(), start_local_api())
    yield servers
    for server in servers:
        server.server.shutdown()
        server.server.server_close()


@pytest.fixture
def api(_api_servers: tuple[LocalApi, LocalApi]) -> LocalApi:
    """The local API, its request log emptied."""
    _api_servers[0].requests.clear()
    return _api_servers[0]


@pytest.fixture
def other_api(_api_servers: tuple[LocalApi, LocalApi]) -> LocalApi:
    """A second local API on another port (not opened by ``allow`` unless asked)."""
    _api_servers[1].requests.clear()
    return _api_servers[1]


@pytest.fixture
def allow(settings: Any) -> Callable[..., None]:
    """allow("127.0.0.1:8080", ...): open these destinations for this test."""

    def open_(*entries: str) -> None:
        settings.TOOLBAY_OUTBOUND_ALLOWED_HOSTS = list(entries)

    settings.TOOLBAY_OUTBOUND_ALLOWED_HOSTS = []
    return open_


@pytest.fixture(autouse=True)
def _fresh_backend_caches() -> Iterator[None]:
    # Test transactions roll back without committing, so the after-commit invalidation
    # never runs; clear what a previous test may have cached under the same key.
    vault.clear_cache()
    upstreams.clear_cache()
    yield
    vault.clear_cache()
    upstreams.clear_cache()
    netguard.resolver = netguard.system_resolve


@pytest.fixture
def http_tool(db: Any) -> Callable[..., Tool]:
    """http_tool(name, config, tenant=None, **fields): a saved, validated HTTP tool."""

    def make(name: str, config: dict[str, Any], **fields: Any) -> Tool:
        tenant = fields.pop("tenant", None)
        defaults: dict[str, Any] = {"description": f"The {name} tool.", "input_schema": {"type": "object"}}
        defaults.update(fields)
        return catalog_entry_create(
            model=Tool,
            tenant=tenant,
            fields={"name": name, "backend_kind": "http", "backend_config": config, **defaults},
        )

    return make


@pytest.fixture(scope="module")
def world(
    request: pytest.FixtureRequest,
    django_db_setup: Any,
    django_db_blocker: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[World]:
    """Two live Toolbay servers and a live runner; tenants pk-alpha and pk-beta with packaged
    servers from the registries (see tests/backends/packaged.py). One per module (its
    ``WORLD_PREFIX`` names the tenants' slugs): a module's tests kill, restart or stop instances."""
    prefix = getattr(request.module, "WORLD_PREFIX", "pk")
    with live_world(django_db_blocker, tmp_path_factory.mktemp("packaged"), prefix) as built:
        yield built
