"""Redis and the database missing, on live servers: only 503s with Retry-After and a JSON
body while a dependency is down, and no error once it is back.

The Redis test starts a redis-server of its own on a free port (never the suite's shared
one), puts a server process in front of it under load from a few clients on the 2026-07-28
leg (each request stands alone, so a Redis restarted empty loses nothing they need), kills
Redis with SIGKILL, and starts it again on the same port. The database test points a server
at a port where no PostgreSQL listens.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from tenants.keys import PREFIX_LENGTH
from tests.mcp.live import free_port, start_server, stop_together
from tests.mcp.wire import headers, rpc
from tests.poll import wait_for

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs the redis-server binary"),
]

MODERN = "2026-07-28"
CLIENTS = 4
META = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}


def _call_headers(key: str) -> dict[str, str]:
    return headers(key, **{"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": "echo"})


class PrivateRedis:
    """A redis-server of this test's own: no persistence, so a restart comes back empty."""

    def __init__(self, directory: Path) -> None:
        self.port = free_port()
        self.directory = directory
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            cwd=self.directory,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        client = redis.Redis(port=self.port, socket_connect_timeout=1)
        wait_for(client.ping, ignore=(redis.ConnectionError,), message="the private redis-server to answer")
        client.close()

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait()


@dataclass
class Load:
    """Clients calling echo back to back; every answer is filed under the phase it was sent and answered in."""

    url: str
    key: str
    phase: str = "up"
    answers: list[tuple[str, int, str | None, Any]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self, label: int) -> None:
        head = _call_headers(self.key)
        with httpx.Client(timeout=30) as http:
            n = 0
            while not self.stop.is_set():
                n += 1
                phase = self.phase
                body = rpc("tools/call", {"name": "echo", "arguments": {"text": f"{label}-{n}"}, "_meta": META}, id=n)
                response = http.post(self.url, json=body, headers=head)
                # A request whose phase changed while it was under way belongs to neither phase:
                # one sent while Redis was down may reach the server after the restart.
                if self.phase != phase:
                    phase = f"{phase}->{self.phase}"
                self.answers.append((phase, response.status_code, response.headers.get("retry-after"), response.json()))

    def count(self, phase: str, status: int) -> int:
        return sum(1 for p, s, _, _ in list(self.answers) if p == phase and s == status)


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path)
    server.start()
    yield server
    if server.process is not None and server.process.poll() is None:
        server.kill()


def test_redis_killed_and_restarted_under_load(private_redis, live_world, tmp_path):
    server = start_server(
        tmp_path, "redis-outage", {"REDIS_URL": private_redis.url, "TOOLBAY_RETRY_AFTER_SECONDS": "1"}
    )
    load = Load(server.endpoint("live-alpha"), live_world.keys["alpha"])
    threads = [threading.Thread(target=load.run, args=(n,), daemon=True) for n in range(CLIENTS)]
    try:
        for thread in threads:
            thread.start()
        wait_for(lambda: load.count("up", 200) >= 20, message="calls to succeed before the outage")
        load.phase = "killing"
        private_redis.kill()
        # "down" starts once the server has answered one 503: a reply Redis sent just before
        # it died may still complete a request that was under way at the kill.
        wait_for(lambda: load.count("killing", 503) >= 1, message="the server to notice Redis is gone")
        load.phase = "down"
        wait_for(lambda: load.count("down", 503) >= 20, message="503s while Redis is down")
        load.phase = "restarting"
        private_redis.start()
        load.phase = "back"
        wait_for(lambda: load.count("back", 200) >= 40, timeout=20, message="calls to succeed once Redis is back")
    finally:
        load.stop.set()
        for thread in threads:
            thread.join(30)
        stop_together([server.process], grace=10)

    figures = Counter((phase, status) for phase, status, _, _ in load.answers)
    print(f"\nanswers by (phase, status): {dict(sorted(figures.items()))}")
    # Whatever the moment, an answer is a 200 or a 503 with Retry-After and a JSON-RPC error.
    for _phase, status, retry_after, body in load.answers:
        assert status in (200, 503), (status, body)
        if status == 503:
            assert retry_after == "1"
            assert body["jsonrpc"] == "2.0" and body["error"]["code"] == -32000
            assert "unavailable" in body["error"]["message"].lower()
        else:
            assert body["result"]["content"][0]["text"]
    assert {status for phase, status, _, _ in load.answers if phase == "down"} == {503}
    # Once Redis answers again, not one request fails: not even the first on a dead connection.
    assert {status for phase, status, _, _ in load.answers if phase == "back"} == {200}
    assert "Traceback" not in server.log_path.read_text()


def test_database_missing_answers_503_on_mcp_and_the_api(live_world, tmp_path):
    nowhere = f"postgres://postgres@127.0.0.1:{free_port()}/toolbay"
    server = start_server(tmp_path, "no-database", {"DATABASE_URL": nowhere, "TOOLBAY_RETRY_AFTER_SECONDS": "3"})
    try:
        with httpx.Client(timeout=30) as http:
            mcp = http.post(
                server.endpoint("live-alpha"),
                json=rpc("tools/call", {"name": "echo", "arguments": {"text": "x"}, "_meta": META}),
                headers=_call_headers(live_world.keys["alpha"]),
            )
            # A token shaped like one, so it is looked up (in the database that is not there).
            token = "tbp_" + "0" * PREFIX_LENGTH + "_secret"
            api = http.get(f"{server.url}/api/v1/tools/", headers={"Authorization": f"Bearer {token}"})
    finally:
        stop_together([server.process], grace=10)
    assert mcp.status_code == 503 and mcp.headers["retry-after"] == "3"
    assert mcp.json()["error"]["code"] == -32000
    assert api.status_code == 503 and api.headers["retry-after"] == "3"
    assert "unavailable" in api.json()["detail"].lower()
