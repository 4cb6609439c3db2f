"""No call without an end: a server or a worker dies mid-call, and the call still ends.

- An inline call whose server process is SIGKILLed: the client resumes with Last-Event-ID on
  the other process and gets, within a bound, an error result it can act on.
- A background call whose relaying server is SIGKILLed: the client resumes elsewhere and
  gets the worker's result.
- A Celery worker SIGKILLed mid-call (main process and pool child): the call is failed
  (not idempotent) or run again on another worker (idempotent) within seconds, noticed by
  the worker's heartbeat rather than the queue's visibility timeout.
- A worker whose handler blocks its event loop past the tool's timeout: the web side ends
  the call as timed out.

These tests start their own servers and workers (they kill them), on a broker key prefix
of their own so no other test's worker takes their calls.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from mcp_platform.mcp.liveness import LOST_CALL_TEXT
from tests.mcp.live import (
    LiveServer,
    LiveWorker,
    child_pids,
    kill_workers,
    run_now,
    start_server,
    start_worker,
    stop_together,
)
from tests.mcp.wire import McpSession, SseEvent, parse_sse, rpc
from tests.poll import wait_for
from tools_app.runs.models import ToolRun

pytestmark = pytest.mark.live

BEAT = "0.5"  # heartbeat interval of the processes these tests start: a death is known in 1.5 s
QUEUES = "toolbay.short,toolbay.long"


def _read_events(stream: httpx.Response, count: int) -> list[SseEvent]:
    lines: list[str] = []
    for line in stream.iter_lines():
        lines.append(line)
        events = parse_sse(lines)
        if len(events) >= count:
            return events
    raise AssertionError(f"stream ended after {parse_sse(lines)}")


def _final(response: httpx.Response) -> dict[str, Any]:
    messages = [e.message for e in parse_sse(response.text.split("\n")) if e.data]
    assert messages and "method" not in messages[-1], f"no response in {messages}"
    return messages[-1]  # type: ignore[return-value]


def _resume(http: httpx.Client, server: LiveServer, session: McpSession, last_id: str) -> httpx.Response:
    headers = session.headers(Accept="text/event-stream", **{"Last-Event-ID": last_id})
    response = http.get(server.endpoint("live-alpha"), headers=headers, timeout=60)
    assert response.status_code == 200, response.text
    return response


@pytest.fixture
def doomed(live_world: Any, tmp_path: Path) -> Iterator[LiveServer]:
    doomed = start_server(tmp_path, "doomed", {"TOOLBAY_HEARTBEAT_SECONDS": BEAT})
    yield doomed
    if doomed.process.poll() is None:
        doomed.stop()


def test_inline_call_of_a_killed_server_ends_with_an_error_result_on_the_other(http, doomed, server, live_world):
    session = McpSession.open(http, doomed.endpoint("live-alpha"), live_world.keys["alpha"])
    call = rpc("tools/call", {"name": "countdown", "arguments": {"n": 100}, "_meta": {"progressToken": "c"}}, id=71)
    with http.stream("POST", session.endpoint, json=call, headers=session.headers()) as stream:
        seen = _read_events(stream, 2)  # priming, then the first progress: the call runs
        os.kill(doomed.process.pid, signal.SIGKILL)
        killed = time.monotonic()
    response = _resume(http, server, session, seen[-1].id or "")
    ended = time.monotonic() - killed
    final = _final(response)
    assert final["id"] == 71
    assert final["result"]["isError"] is True
    assert final["result"]["content"][0]["text"] == LOST_CALL_TEXT
    print(f"\ninline call: ended {ended:.2f} s after its server died")
    # Three missed beats of 0.5 s, then the follower's next check (every 2 s by default).
    assert ended < 8, f"the call ended {ended:.1f} s after its server died"


def test_background_call_of_a_killed_server_ends_on_the_other(http, doomed, server, live_world, live_workers):
    session = McpSession.open(http, doomed.endpoint("live-alpha"), live_world.keys["alpha"])
    call = rpc("tools/call", {"name": "slow_count", "arguments": {"count": 20}, "_meta": {"progressToken": "b"}}, id=72)
    with http.stream("POST", session.endpoint, json=call, headers=session.headers()) as stream:
        seen = _read_events(stream, 2)
        os.kill(doomed.process.pid, signal.SIGKILL)
    final = _final(_resume(http, server, session, seen[-1].id or ""))
    assert final["id"] == 72
    assert final["result"]["content"][0]["text"] == "Counted to 20."


# --- workers killed mid-call ---------------------------------------------------------------


@dataclass
class KillWorld:
    server: LiveServer
    workers: list[LiveWorker]
    tmp: Path
    env: dict[str, str]

    def add_worker(self, name: str) -> None:
        self.workers.append(start_worker(self.tmp, name, QUEUES, self.env))

    def kill_running(self, run: ToolRun) -> float:
        """SIGKILL the whole worker (main process and pool child) running ``run``; when."""
        for worker in self.workers:
            if run.worker_pid in child_pids(worker.process.pid):
                os.kill(worker.process.pid, signal.SIGKILL)
                os.kill(run.worker_pid, signal.SIGKILL)
                killed = time.monotonic()
                worker.process.wait()
                self.workers.remove(worker)
                return killed
        raise AssertionError(f"no worker of this test runs pid {run.worker_pid}")


@pytest.fixture(scope="module")
def kill_world(live_world: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KillWorld]:
    tmp = tmp_path_factory.mktemp("kill-world")
    env = {
        "TOOLBAY_HEARTBEAT_SECONDS": BEAT,
        "CELERY_BROKER_KEY_PREFIX": "call-ends:",
        # The web side ends a run its worker cannot stop 1 s (not 5 s) after timeout and grace.
        "TOOLBAY_RUN_DEADLINE_SLACK_SECONDS": "1",
    }
    world = KillWorld(start_server(tmp, "kill-server", env), [], tmp, env)
    try:
        world.add_worker("kill-worker-1")
        world.add_worker("kill-worker-2")
        yield world
    finally:
        # Killed, not stopped: one may still run test_web_side_ends_a_call_its_worker_cannot_time_out's
        # blocking handler, which a warm shutdown would wait out (about 10 s).
        kill_workers(world.workers)
        stop_together([world.server.process], grace=15)


def _running_run(session: McpSession, request_id: int) -> ToolRun:
    def started() -> ToolRun | None:
        run = ToolRun.objects.filter(session_id=session.session_id, request_id=request_id).first()
        return run if run is not None and run.worker_pid and run.worker_id else None

    return wait_for(started, timeout=30, message=f"a worker to start request {request_id}")


# soak/call_ends.py kills more workers, and prints every time.
KILLS = int(os.environ.get("TOOLBAY_SOAK_KILLS", "1"))


@pytest.mark.parametrize(("tool", "outcome"), [("bg_count_once", "failed"), ("slow_count", "re-run")])
def test_killed_worker_ends_the_call_within_seconds(orm, http, kill_world, live_world, tool, outcome):
    session = McpSession.open(http, kill_world.server.endpoint("live-alpha"), live_world.keys["alpha"])
    times = []
    for kill in range(KILLS):
        if len(kill_world.workers) < 2:
            kill_world.add_worker(f"kill-worker-{tool}-{kill}")
        request_id = 1000 + kill
        pending = session.post_in_thread(rpc("tools/call", {"name": tool, "arguments": {"count": 30}}, id=request_id))
        run = _running_run(session, request_id)
        killed = kill_world.kill_running(run)
        if outcome == "failed":
            final = _final(pending.response())
            times.append(time.monotonic() - killed)
            assert final["result"]["isError"] is True
            assert "not retried because the tool is not marked idempotent" in final["result"]["content"][0]["text"]
            run = run_now(run)
            assert run.status == ToolRun.Status.FAILED and run.attempts == 1
        else:
            rerun = wait_for(
                lambda run=run: ToolRun.objects.filter(pk=run.id, attempts=2).exclude(worker_id=run.worker_id).first(),
                timeout=30,
                message="the call to run again on the other worker",
            )
            times.append(time.monotonic() - killed)
            final = _final(pending.response())
            print(f"\nslow_count re-run from the start, answered {time.monotonic() - killed:.2f} s after the death")
            assert final["result"]["content"][0]["text"] == "Counted to 30."
            rerun = run_now(rerun)
            assert rerun.status == ToolRun.Status.COMPLETED
    print(f"\n{tool}: {outcome} after its worker died, in s: " + ", ".join(f"{t:.2f}" for t in times))
    # Three missed beats of 0.5 s and the relaying server's next check (every 0.5 s).
    assert max(times) < 6, f"a call was {outcome} {max(times):.1f} s after its worker died"


def test_web_side_ends_a_call_its_worker_cannot_time_out(orm, http, kill_world, live_world):
    session = McpSession.open(http, kill_world.server.endpoint("live-alpha"), live_world.keys["alpha"])
    started = time.monotonic()
    answer = session.request("tools/call", {"name": "bg_loop_blocker", "arguments": {"seconds": 15}})
    took = time.monotonic() - started
    assert answer["result"]["isError"] is True
    assert "timed out after 1 seconds (its worker did not stop it)" in answer["result"]["content"][0]["text"]
    # Timeout 1 s + grace 0.5 s + slack 1 s + one check interval, well before the handler returns.
    assert took < 8, took
