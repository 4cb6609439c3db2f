"""One client's burst does not cost another client anything: with a tiny Redis pool
(REDIS_MAX_CONNECTIONS=2, so requests must wait for connections), one tenant sends several
100-request batches at once on a 2025-03-26 session while another tenant calls one request
at a time on the 2026-07-28 leg. Every request of both gets its result; nothing fails for
want of a connection.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.mcp.live import LiveServer, start_server, stop_together
from tests.mcp.wire import McpSession, headers, rpc

pytestmark = pytest.mark.live

MODERN = "2026-07-28"
BATCHES = 4
BATCH_SIZE = 100


@pytest.fixture(scope="module")
def small_pool(live_world: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = start_server(
        tmp_path_factory.mktemp("small-pool"),
        "small-pool",
        {"REDIS_MAX_CONNECTIONS": "2", "REDIS_POOL_TIMEOUT_SECONDS": "20", "MCP_SESSION_MAX_IN_FLIGHT": str(BATCHES)},
    )
    yield server
    stop_together([server.process], grace=10)


def test_a_burst_of_batches_does_not_hurt_another_tenant(small_pool, live_world):
    greedy_answers: list[httpx.Response] = []
    calm_answers: list[httpx.Response] = []
    with httpx.Client(timeout=60) as http:
        greedy = McpSession.open(
            http, small_pool.endpoint("live-alpha"), live_world.keys["alpha"], version="2025-03-26"
        )

        def burst(label: int) -> None:
            batch = [
                rpc("tools/call", {"name": "echo", "arguments": {"text": f"{label}-{n}"}}, id=n)
                for n in range(BATCH_SIZE)
            ]
            greedy_answers.append(greedy.post(batch))

        calm_headers = headers(
            live_world.keys["beta"], **{"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": "echo"}
        )
        meta = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}
        threads = [threading.Thread(target=burst, args=(label,)) for label in range(BATCHES)]
        for thread in threads:
            thread.start()
        with httpx.Client(timeout=60) as calm:
            while any(thread.is_alive() for thread in threads) or len(calm_answers) < 10:
                body = rpc("tools/call", {"name": "echo", "arguments": {"text": "calm"}, "_meta": meta}, id=1)
                calm_answers.append(calm.post(small_pool.endpoint("live-beta"), json=body, headers=calm_headers))
        for thread in threads:
            thread.join(60)

    assert len(greedy_answers) == BATCHES
    for response in greedy_answers:
        assert response.status_code == 200, response.text[:300]
        messages = json.loads(response.text)
        assert len(messages) == BATCH_SIZE and all("result" in message for message in messages)
    assert all(response.status_code == 200 for response in calm_answers), {r.status_code for r in calm_answers}
    assert all(response.json()["result"]["content"][0]["text"] == "calm" for response in calm_answers)
    assert "Traceback" not in small_pool.log_path.read_text()
