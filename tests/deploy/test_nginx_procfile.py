"""The processes of deploy/Procfile behind real nginx with deploy/nginx.conf: what a host that
runs the Procfile serves.

The release step migrates a database of the test's own; two web processes (the Procfile's
``web`` line with two ports, as ``honcho start -c web=2`` runs it), both workers, beat, the
audit writer and the upstream listener start as the Procfile says (its commands through
``sh -c``; only the listen address, the port and beat's schedule file are substituted) on a
Redis db of their own, and nginx (deploy/nginx.conf with the test's port, a throw-away
certificate and the two web ports) proxies for SDK clients over HTTPS. Checked: a session
moves between the two web processes, an SSE stream arrives event by event, a background call
runs on a worker, and both web processes restarted in turn under load cost no client an error.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import httpx2
import psycopg
import pytest
import redis
from cryptography.fernet import Fernet
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client

from audit.journal import JOURNAL_KEY
from tests.deploy.deployment import ROOT, VENV_BIN, procfile
from tests.deploy.nginx import nginx_binary, write_config
from tests.load import Tally, call_until_stopped
from tests.poll import wait_for, wait_for_async

pytestmark = pytest.mark.live

# A Redis db of its own (flushed here; the audit journal and the sessions have no key prefix)
# and a PostgreSQL database of its own next to the suite's.
REDIS_URL = os.environ.get("TOOLBAY_DEPLOY_TEST_REDIS_URL", "redis://127.0.0.1:6379/11")
SUITE_DATABASE_URL = os.environ.get("TOOLBAY_TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/toolbay")
CLIENTS = 4


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _database_url() -> str:
    parts = urlsplit(SUITE_DATABASE_URL)
    return urlunsplit(parts._replace(path=f"/test_{parts.path.lstrip('/')}_procfile"))


def _recreate_database(url: str) -> None:
    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def _start_pgbouncer(database_url: str) -> tuple[subprocess.Popen[bytes], str] | None:
    """PgBouncer in transaction mode in front of ``database_url`` (None when it is not
    installed): the processes reach the database through it, as behind a cluster's pooler."""
    binary = shutil.which("pgbouncer") or ("/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").exists() else None)
    if binary is None:
        return None
    parts = urlsplit(database_url)
    name = parts.path.lstrip("/")
    port = _free_port()
    password = f" password={parts.password}" if parts.password else ""
    # PgBouncer refuses to run as root; its files must be readable by the user it runs as.
    directory = Path(tempfile.mkdtemp(prefix="toolbay-pgbouncer-"))
    directory.chmod(0o755)
    ini = directory / "pgbouncer.ini"
    ini.write_text(
        f"""[databases]
{name} = host={parts.hostname} port={parts.port or 5432} dbname={name} user={parts.username}{password}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = any
pool_mode = transaction
max_client_conn = 1000
default_pool_size = 20
ignore_startup_parameters = extra_float_digits,options
"""
    )
    ini.chmod(0o644)
    prefix = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"] if os.geteuid() == 0 else []
    process = subprocess.Popen([*prefix, binary, str(ini)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = urlunsplit(parts._replace(netloc=f"{parts.username}@127.0.0.1:{port}"))
    try:
        wait_for(lambda: psycopg.connect(url, connect_timeout=2).close() is None, timeout=15, ignore=(psycopg.Error,))
    except BaseException:
        process.kill()
        raise
    return process, url


@dataclass
class Process:
    name: str
    command: str
    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] = field(init=False)

    def start(self) -> Process:
        # Its own process group: Celery's pool children go with it.
        self.process = subprocess.Popen(
            ["sh", "-c", f"exec {self.command}"],
            cwd=ROOT,
            env=self.env,
            stdout=self.log_path.open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError(f"{self.name} exited ({self.process.returncode}):\n{self.log()[-4000:]}")
        return True

    def terminate(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)

    def wait(self, timeout: float) -> None:
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


@dataclass
class Deployment:
    database_url: str
    url: str
    key: str
    ssl: ssl.SSLContext
    web: list[Process]
    others: list[Process]
    nginx: subprocess.Popen[bytes]
    access_log: Path
    error_log: Path

    def wait_ready(self, web: Process) -> None:
        port = web.env["PORT"]
        wait_for(
            lambda: web.alive() and httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200,
            timeout=30,
            ignore=(httpx.TransportError,),
            message=lambda: f"{web.name} to answer /readyz; its log:\n{web.log()[-4000:]}",
        )

    def restart(self, i: int) -> float:
        """SIGTERM to web process i, wait for its end, start it again: the README's rolling
        restart, one process at a time. Returns the seconds it was away."""
        old = self.web[i]
        started = time.monotonic()
        old.terminate()
        old.wait(30)
        self.web[i] = Process(old.name, old.command, old.env, old.log_path).start()
        self.wait_ready(self.web[i])
        return time.monotonic() - started


def _sh(command: str, env: dict[str, str]) -> str:
    result = subprocess.run(["sh", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"{command}:\n{result.stdout}{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    binary = nginx_binary()
    if binary is None:
        pytest.skip("nginx is not installed (apt-get install nginx); make test installs it when it can")
    tmp = tmp_path_factory.mktemp("procfile")
    database_url = _database_url()
    _recreate_database(database_url)
    redis.Redis.from_url(REDIS_URL).flushdb()
    env = {
        **os.environ,
        "PATH": f"{VENV_BIN}:{os.environ['PATH']}",
        "DJANGO_SETTINGS_MODULE": "mcp_platform.settings",
        "DEBUG": "0",
        "SECRET_KEY": uuid.uuid4().hex * 2,
        "TOOLBAY_SECRET_KEYS": Fernet.generate_key().decode(),
        "ALLOWED_HOSTS": "localhost,127.0.0.1",
        "DATABASE_URL": database_url,
        "REDIS_URL": REDIS_URL,
        "LOG_FORMAT": "json",
        # nginx is the proxy the web processes believe X-Forwarded-For from.
        "TOOLBAY_TRUSTED_PROXIES": "127.0.0.1",
        # Quick beats: a lost call is known lost within seconds (README "No call without an end").
        "TOOLBAY_HEARTBEAT_SECONDS": "0.5",
        "MCP_SSE_KEEPALIVE_SECONDS": "1",
    }
    for name in ("CHANNEL_LAYER_PREFIX", "TOOLBAY_HANDLER_MODULES", "CELERY_BROKER_KEY_PREFIX"):
        env.pop(name, None)
    processes = procfile()
    _sh(processes["release"], env)
    # Every process after the release step goes through PgBouncer in transaction mode when it
    # is installed (README "Kubernetes": PgBouncer).
    pgbouncer = _start_pgbouncer(database_url)
    if pgbouncer is not None:
        env = {**env, "DATABASE_URL": pgbouncer[1], "DATABASE_PGBOUNCER": "1"}
    # The demo tenant, its tools and a key, while the processes start (nothing waits for them).
    seed = subprocess.Popen(
        ["sh", "-c", "python manage.py seed_demo && python manage.py create_api_key demo --name procfile"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )

    def command(name: str) -> str:
        # Loopback only, and beat's schedule file in the test's directory.
        text = processes[name].replace("--host 0.0.0.0", "--host 127.0.0.1")
        return text.replace("/tmp/celerybeat-schedule", shlex.quote(str(tmp / "celerybeat-schedule")))

    web_ports = [_free_port(), _free_port()]
    web = [
        Process(f"web.{i + 1}", command("web"), {**env, "PORT": str(port)}, tmp / f"web.{i + 1}.log")
        for i, port in enumerate(web_ports)
    ]
    others = [
        Process(name, command(name), env, tmp / f"{name}.log") for name in processes if name not in ("release", "web")
    ]
    listen_port = _free_port()
    conf = write_config(tmp, listen_port=listen_port, upstream_ports=web_ports, static_root=tmp)
    for sub in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (tmp / sub).mkdir()
    nginx: subprocess.Popen[bytes] | None = None
    started: list[Process] = []
    deployment: Deployment | None = None
    try:
        for process in [*web, *others]:
            started.append(process.start())
        nginx = subprocess.Popen(
            [binary, "-c", str(conf), "-p", str(tmp)], stdout=subprocess.DEVNULL, stderr=(tmp / "nginx.out").open("wb")
        )
        output, _ = seed.communicate(timeout=120)
        assert seed.returncode == 0, output
        key = output.strip().splitlines()[-1]
        context = ssl.create_default_context(cafile=str(tmp / "cert.pem"))
        deployment = Deployment(
            database_url,
            f"https://localhost:{listen_port}",
            key,
            context,
            web,
            others,
            nginx,
            tmp / "access.log",
            tmp / "error.log",
        )
        for process in web:
            deployment.wait_ready(process)
        for process in others:
            if " worker " in process.command:
                wait_for(
                    lambda p=process: p.alive() and "ready." in p.log(),
                    timeout=60,
                    message=lambda p=process: f"{p.name} to log 'ready.':\n{p.log()[-4000:]}",
                )
        wait_for(
            lambda: httpx.get(f"{deployment.url}/healthz", verify=context, timeout=2).status_code == 200,
            timeout=15,
            ignore=(httpx.TransportError,),
            message=lambda: f"nginx to answer; {(tmp / 'nginx.out').read_text()}",
        )
        yield deployment
        for process in [*deployment.web, *others]:  # nothing crashed meanwhile
            process.alive()
    finally:
        if seed.poll() is None:
            seed.kill()
            seed.wait()
        if nginx is not None:
            nginx.terminate()
            nginx.wait(10)
        # The web processes running now (restarted ones replaced their predecessors).
        running = [*started, *(deployment.web if deployment else [])]
        for process in running:
            process.terminate()
        for process in running:
            process.wait(20)
        if pgbouncer is not None:
            pgbouncer[0].terminate()
            pgbouncer[0].wait(10)


def _http(deployment: Deployment, **kwargs: Any) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {deployment.key}"}, timeout=30, verify=deployment.ssl, **kwargs
    )


def _upstreams(deployment: Deployment) -> dict[str, set[str]]:
    """Session id -> the upstream addresses that answered its requests (nginx's access log;
    after a retry it lists every address tried, the last one answered)."""
    seen: dict[str, set[str]] = {}
    for line in deployment.access_log.read_text().splitlines():
        status, session, _method, _uri, _upstream_status, upstreams = line.split(" ", 5)
        if session != "-" and status.startswith("2"):
            seen.setdefault(session, set()).add(upstreams.split(", ")[-1])
    return seen


def test_a_session_moves_between_the_web_processes(deployment):
    async def scenario() -> None:
        # A 2025-11-25 session (Mcp-Session-Id); nginx takes turns between the web processes.
        transport = streamable_http_client(f"{deployment.url}/mcp/demo", http_client=_http(deployment))
        async with Client(transport, mode="legacy") as client:
            for i in range(6):
                result = await client.call_tool("echo", {"text": f"hop {i}"})
                assert result.content[0].text == f"hop {i}"  # type: ignore[union-attr]

    asyncio.run(scenario())
    ports = {process.env["PORT"] for process in deployment.web}
    moved = [s for s, upstreams in _upstreams(deployment).items() if {u.rsplit(":", 1)[1] for u in upstreams} == ports]
    assert moved, f"no session was served by both web processes: {_upstreams(deployment)}"


def test_an_sse_stream_arrives_event_by_event(deployment):
    """countdown reports progress every 0.2 s: through nginx each event must arrive when it is
    sent, not all together at the end (proxy buffering)."""
    headers = {
        "Authorization": f"Bearer {deployment.key}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    url = f"{deployment.url}/mcp/demo"
    with httpx.Client(verify=deployment.ssl, timeout=30, headers=headers) as http:
        init = http.post(
            url,
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "sse-check", "version": "1"},
                },
            },
        )
        assert init.status_code == 200, init.text
        session = {"Mcp-Session-Id": init.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
        http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "countdown", "arguments": {"n": 5}, "_meta": {"progressToken": "p"}},
        }
        arrivals: list[tuple[float, str]] = []
        with http.stream("POST", url, json=call, headers=session) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            started = time.monotonic()
            for line in response.iter_lines():
                if line.startswith("data:"):
                    kind = "progress" if "notifications/progress" in line else "result" if '"result"' in line else "?"
                    arrivals.append((time.monotonic() - started, kind))
    progress = [t for t, kind in arrivals if kind == "progress"]
    (result,) = [t for t, kind in arrivals if kind == "result"]
    assert len(progress) == 5, arrivals
    # Five steps 0.2 s apart: the first arrives about 0.8 s before the result, not with it.
    assert result - progress[0] > 0.5, arrivals
    assert progress == sorted(progress) and progress[-1] - progress[0] > 0.4, arrivals


def test_a_background_call_runs_on_a_worker(deployment):
    async def scenario() -> str:
        transport = streamable_http_client(f"{deployment.url}/mcp/demo", http_client=_http(deployment))
        async with Client(transport) as client:
            result = await client.call_tool("slow_count", {"count": 3})
            return str(result.content[0].text)  # type: ignore[union-attr]

    assert asyncio.run(scenario()) == "Counted to 3."
    workers = [p for p in deployment.others if " worker " in p.command]
    wait_for(
        lambda: any(re.search(r"Task [\w.]+\[[-\w]+\] succeeded", p.log()) for p in workers),
        timeout=10,
        message=lambda: "a worker to log the run; " + " / ".join(p.log()[-2000:] for p in workers),
    )
    names = {re.search(r"-n (\S+)", p.command).group(1) for p in workers}  # type: ignore[union-attr]
    assert len(names) == len(workers)


def _tool_rows(deployment: Deployment) -> int:
    with psycopg.connect(deployment.database_url) as conn:
        row = conn.execute("SELECT count(*) FROM audit_invocation WHERE kind = 'tool'").fetchone()
    assert row is not None
    return int(row[0])


def test_rolling_restart_of_both_web_processes_under_load(deployment):
    tally = Tally()
    # The earlier tests' rows are in the database first (the writer empties the journal).
    journal = redis.Redis.from_url(REDIS_URL)
    wait_for(lambda: journal.xlen(JOURNAL_KEY) == 0, timeout=30)
    journal.close()
    rows_before = _tool_rows(deployment)
    away: list[float] = []
    log_lines_before = len(deployment.access_log.read_text().splitlines())

    async def scenario() -> None:
        stop = asyncio.Event()
        clients = [
            asyncio.ensure_future(
                call_until_stopped(
                    f"{deployment.url}/mcp/demo", _http(deployment), f"c{i}", stop, tally, countdown=2, count=3
                )
            )
            for i in range(CLIENTS)
        ]

        async def load(more: int) -> None:
            answered = tally.answered
            await wait_for_async(
                lambda: tally.answered >= answered + more or all(c.done() for c in clients),
                timeout=30,
                interval=0.05,
                message=lambda: f"{more} more answered calls (answered {tally.answered})",
            )

        await load(8)
        for i in range(len(deployment.web)):  # one at a time, the next once the first is ready
            away.append(await asyncio.to_thread(deployment.restart, i))
        await load(8)
        stop.set()
        await asyncio.gather(*clients)

    started = time.monotonic()
    asyncio.run(asyncio.wait_for(scenario(), 60))
    requests = deployment.access_log.read_text().splitlines()[log_lines_before:]
    failed = [line for line in requests if not line.startswith("2")]
    print(
        f"\nrolling restart behind nginx: {len(deployment.web)} web processes restarted in turn "
        f"(away {', '.join(f'{s:.1f}' for s in away)} s), {CLIENTS} SDK clients, {tally.answered} calls answered, "
        f"{len(tally.errors)} client errors, {len(requests)} requests through nginx, {len(failed)} not 2xx, "
        f"{time.monotonic() - started:.1f} s"
    )
    assert tally.errors == []
    assert tally.answered >= 16
    assert failed == [], failed[:10]
    # Every answered call has its invocation row, exactly once (the audit writer, through
    # PgBouncer when it is installed, drains the journal).
    wait_for(lambda: _tool_rows(deployment) - rows_before >= tally.answered, timeout=30)
    assert _tool_rows(deployment) - rows_before == tally.answered
