"""Slow clients on a live server: a body that trickles in is cut off with a 408, and one
address cannot hold more than its share of open requests (429), on the MCP endpoint and
Django's routes alike.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.mcp.live import LiveServer, start_server, stop_together
from tests.poll import wait_for

pytestmark = pytest.mark.live

BODY_TIMEOUT = 1.0


def _start(tmp_path_factory: pytest.TempPathFactory, name: str, env: dict[str, str]) -> Iterator[LiveServer]:
    server = start_server(tmp_path_factory.mktemp(name), name, env)
    yield server
    stop_together([server.process], grace=10)


@pytest.fixture(scope="module")
def impatient(live_world: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    yield from _start(tmp_path_factory, "impatient", {"TOOLBAY_BODY_READ_TIMEOUT_SECONDS": str(BODY_TIMEOUT)})


@pytest.fixture(scope="module")
def capped(live_world: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    yield from _start(tmp_path_factory, "capped", {"TOOLBAY_MAX_CONNECTIONS_PER_CLIENT": "3"})


def _open_request(server: LiveServer, path: str, key: str = "", length: int = 100) -> socket.socket:
    """A POST whose headers promise ``length`` bytes of body and whose body never comes."""
    address = urlsplit(server.url)
    sock = socket.create_connection((address.hostname, address.port), timeout=10)
    authorization = f"Authorization: Bearer {key}\r\n" if key else ""
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n{authorization}"
        f"Accept: application/json, text/event-stream\r\nContent-Length: {length}\r\n\r\n".encode()
    )
    return sock


def _read_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.parametrize("path", ["/mcp/live-alpha", "/api/v1/tools/"])
def test_a_trickling_body_gets_408_and_its_connection_closed(impatient, live_world, path):
    sock = _open_request(impatient, path, live_world.keys["alpha"])
    started = time.monotonic()
    with sock:
        # One byte every 0.2 s, as a slowloris client sends: the body would take 20 s.
        try:
            for _ in range(100):
                sock.sendall(b" ")
                time.sleep(0.2)  # the trickle is the behaviour under test
                if time.monotonic() - started > BODY_TIMEOUT + 5:
                    break
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server closed the connection: what the test wants
        answer = _read_all(sock)
    elapsed = time.monotonic() - started
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), answer[:300]
    assert b"connection: close" in head.lower()
    payload = json.loads(body)
    message = payload["error"]["message"] if path.startswith("/mcp/") else payload["detail"]
    assert "did not arrive within 1 s" in message
    assert elapsed < BODY_TIMEOUT + 5


def test_an_answer_before_the_body_closes_the_connection(impatient):
    """Without a credential the endpoint answers 401 at once, body unread: the connection is
    closed rather than left to the trickle."""
    with _open_request(impatient, "/mcp/live-alpha") as sock:
        answer = _read_all(sock)
    head = answer.partition(b"\r\n\r\n")[0].lower()
    assert head.startswith(b"http/1.1 401") and b"connection: close" in head


def test_many_slow_bodies_are_all_cut_off_and_others_still_served(impatient, live_world):
    sockets = [_open_request(impatient, "/mcp/live-alpha", live_world.keys["alpha"]) for _ in range(50)]
    with ExitStack() as stack:
        for sock in sockets:
            stack.enter_context(sock)
        # Meanwhile an ordinary client is served at once.
        assert httpx.get(f"{impatient.url}/healthz", timeout=5).status_code == 200
        answers = [_read_all(sock) for sock in sockets]
    assert all(answer.startswith(b"HTTP/1.1 408") for answer in answers)


def test_one_address_cannot_hold_more_than_its_share(capped, live_world):
    # Authenticated POSTs whose body does not come: the endpoint waits for it.
    held = [_open_request(capped, "/mcp/live-alpha", live_world.keys["alpha"]) for _ in range(3)]

    def refused() -> httpx.Response | None:
        response = httpx.get(f"{capped.url}/healthz", timeout=5)
        return response if response.status_code == 429 else None

    with ExitStack() as stack:
        for sock in held:
            stack.enter_context(sock)
        answer = wait_for(refused, message="a fourth request from the address to be refused")
        assert answer.headers["retry-after"] == "1"
        assert answer.json() == {"detail": "Too many requests: at most 3 open at once from one address"}
        mcp = httpx.post(f"{capped.url}/mcp/live-alpha", json={}, timeout=5)
        assert mcp.status_code == 429 and mcp.json()["error"]["code"] == -32000
    # The held requests are gone: the address is served again.
    wait_for(
        lambda: httpx.get(f"{capped.url}/healthz", timeout=5).status_code == 200,
        message="the address to be served once its requests closed",
    )
