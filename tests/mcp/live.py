"""Real server processes for live tests: uvicorn, the audit writer, Celery workers, each on
loopback against the test database and Redis. The fixtures that start them for a session are
in tests/mcp/conftest.py; tests that start their own (restarts, kills) use these directly.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

import httpx
import redis
from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import connection

from audit.journal import JOURNAL_KEY
from audit.writer import GROUP
from tests.poll import wait_for
from tools_app.runs import store
from tools_app.runs.models import ToolRun

ROOT = Path(__file__).resolve().parents[2]
LIVE_PAGE_SIZE = 3


def journal_drained() -> bool:
    """Every invocation row the servers journaled is in PostgreSQL (the stream is empty and no
    entry is pending with a writer). A test that deletes its tenant waits for this first: a row
    the writer inserts after the delete began would reference a tenant that is going away."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        return bool(client.xlen(JOURNAL_KEY) == 0 and client.xpending(JOURNAL_KEY, GROUP)["pending"] == 0)
    except redis.ResponseError:  # no stream or group yet: nothing was journaled
        return True
    finally:
        client.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def database_url(port: int | None = None) -> str:
    """The test database's URL; with ``port``, reached through that port on loopback (a proxy)."""
    db = connection.settings_dict
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    where = f"127.0.0.1:{port}" if port else f"{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}"
    return f"postgres://{db['USER']}{password}@{where}/{db['NAME']}"


class Stoppable(Protocol):
    def stop(self) -> None: ...


S = TypeVar("S", bound=Stoppable)


def start_together(*starts: Callable[[], S]) -> list[S]:
    """Run several ``start_*`` calls at once (each process spends seconds importing; one after
    the other they would add up) and return what each started, in order. If one fails, the
    others' processes are stopped and its error raised."""
    with ThreadPoolExecutor(max_workers=len(starts)) as booting:
        futures = [booting.submit(start) for start in starts]
    errors = [error for future in futures if (error := future.exception()) is not None]
    if errors:
        for future in futures:
            if future.exception() is None:
                future.result().stop()
        raise errors[0]
    return [future.result() for future in futures]


def stop_together(processes: list[subprocess.Popen[bytes]], grace: float) -> None:
    """Ask every process to shut down at once, then wait for each (killed after ``grace``
    seconds): their shutdowns overlap instead of adding up."""
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _spawn(
    tmp_dir: Path, name: str, command: list[str], extra_env: dict[str, str]
) -> tuple[subprocess.Popen[bytes], Path]:
    """Starts ``command`` in the project's folder on the test database and Redis, its output
    in ``<tmp_dir>/<name>.log``."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "mcp_platform.settings",
        "DATABASE_URL": database_url(),
        "REDIS_URL": settings.REDIS_URL,
        **extra_env,
    }
    log_path = tmp_dir / f"{name}.log"
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log_path.open("wb"), stderr=subprocess.STDOUT)
    return process, log_path


@dataclass
class LiveServer:
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def endpoint(self, tenant: str) -> str:
        return f"{self.url}/mcp/{tenant}"

    def stop(self) -> None:
        stop_together([self.process], grace=10)


def start_server(
    tmp_dir: Path, name: str, extra_env: dict[str, str] | None = None, port: int | None = None
) -> LiveServer:
    """``port``: serve on that port (a restarted server takes its predecessor's place)."""
    port = port or free_port()
    env = {
        "CHANNEL_LAYER_PREFIX": os.environ["CHANNEL_LAYER_PREFIX"],
        "MCP_PAGE_SIZE": str(LIVE_PAGE_SIZE),
        "MCP_CLIENT_REQUEST_TIMEOUT_SECONDS": "10",
        "MCP_CANCEL_GRACE_SECONDS": "0.5",
        "MCP_SSE_KEEPALIVE_SECONDS": "1",
        "MCP_MAX_BODY_BYTES": "65536",
        **(extra_env or {}),
    }
    process, log_path = _spawn(
        tmp_dir,
        name,
        [
            sys.executable,
            "-m",
            "uvicorn",
            "mcp_platform.asgi:application",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
            "--no-access-log",
            # As production launches it: X-Forwarded-* from no one unless configured.
            "--forwarded-allow-ips",
            os.environ.get("TOOLBAY_TRUSTED_PROXIES", ""),
        ],
        env,
    )
    server = LiveServer(f"http://127.0.0.1:{port}", process, log_path)

    def healthy() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"server {name} exited:\n{log_path.read_text()}")
        return httpx.get(f"{server.url}/healthz", timeout=1).status_code == 200

    try:
        wait_for(
            healthy,
            timeout=30,
            ignore=(httpx.TransportError,),
            message=lambda: f"server {name} to answer /healthz; its log:\n{log_path.read_text()}",
        )
    except BaseException:
        server.stop()
        raise
    return server


@dataclass
class LiveWriter:
    """An ``audit_writer`` process: moves invocation rows from the Redis journal to the database."""

    process: subprocess.Popen[bytes]
    log_path: Path

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()


def start_audit_writer(
    tmp_dir: Path, name: str = "audit-writer", extra_env: dict[str, str] | None = None
) -> LiveWriter:
    # Rows a killed writer took are taken over quickly.
    env = {"AUDIT_WRITER_CLAIM_IDLE_SECONDS": "1", **(extra_env or {})}
    process, log_path = _spawn(tmp_dir, name, [sys.executable, "manage.py", "audit_writer"], env)
    return LiveWriter(process, log_path)


@dataclass
class LiveWorker:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def stop(self) -> None:
        stop_together([self.process], grace=15)


def kill_workers(workers: list[LiveWorker]) -> None:
    """SIGKILL workers a teardown is done with, pool children first. A Celery worker's warm
    shutdown takes 2-3 s even when idle (billiard joins its pool's threads, which poll about
    once a second; measured with a bare Celery app too), and once the tests are done it has
    nothing left to finish."""
    for worker in workers:
        for pid in (*child_pids(worker.process.pid), worker.process.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    for worker in workers:
        worker.process.wait()


def child_pids(pid: int) -> set[int]:
    """The child processes of ``pid`` (a worker's pool, a script's children)."""
    children = Path(f"/proc/{pid}/task/{pid}/children")
    try:
        return {int(child) for child in children.read_text().split()}
    except FileNotFoundError:  # it has ended
        return set()


def start_worker(tmp_dir: Path, name: str, queues: str, extra_env: dict[str, str] | None = None) -> LiveWorker:
    env = {
        "MCP_CANCEL_GRACE_SECONDS": "0.5",
        "MCP_CLIENT_REQUEST_TIMEOUT_SECONDS": "10",
        "TOOLBAY_RETRY_BACKOFF_SECONDS": "0.05",
        **(extra_env or {}),
    }
    process, log_path = _spawn(
        tmp_dir,
        name,
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "mcp_platform",
            "worker",
            "-Q",
            queues,
            "-c",
            "1",
            "-P",
            "prefork",
            "-n",
            f"{name}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-l",
            "INFO",
        ],
        env,
    )
    worker = LiveWorker(name, process, log_path)

    def ready() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"worker {name} exited:\n{log_path.read_text()}")
        return b"ready." in log_path.read_bytes()

    try:
        wait_for(ready, timeout=60, message=lambda: f"worker {name} to log 'ready.'; its log:\n{log_path.read_text()}")
    except BaseException:
        process.kill()
        raise
    return worker


def run_now(run: ToolRun) -> ToolRun:
    """The run as the platform reads it now (its live state in Redis, else its row, which
    the audit writer writes behind)."""
    now = async_to_sync(store.load)(run.id)
    assert now is not None, f"run {run.id} is gone"
    return now
