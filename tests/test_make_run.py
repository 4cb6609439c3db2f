"""`make run` stops every process it started, however it is stopped.

Its children sit in process groups of their own (so one Ctrl-C reaches the script, which
stops each group in turn), so a signal to make's group alone would not reach them: the
script must. It runs here on its own ports, with its own private redis-server (started by
run.sh because nothing answers on the port it is given) and its own SQLite file (a copy of
one migrated once for the module), so it shares nothing with the suite's servers and workers.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.mcp.live import child_pids
from tests.poll import wait_for

pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parents[1]
WAYS = ["SIGTERM to the group", "SIGKILL to make and the script"]
if os.environ.get("TOOLBAY_SOAK_MAKE_RUN"):  # soak/make_run_signals.py: every way
    WAYS += ["SIGTERM to make", "SIGINT to the group", "SIGINT twice to the group"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _session_members(sid: int) -> set[int]:
    """Processes of the session ``make`` leads: every descendant (none calls setsid)."""
    members = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # ended meanwhile
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[3]) == sid and fields[0] != "Z":
            members.add(int(entry.name))
    return members


def _own_environment() -> dict[str, str]:
    """The environment without the suite's own settings (its databases, prefixes, broker)."""
    return {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DJANGO_", "TOOLBAY_TEST_", "CHANNEL_LAYER_", "CELERY_"))
    }


@pytest.fixture(scope="module")
def migrated_database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated once for the module, which each test copies: `make run` still
    runs migrate (then a no-op), seed_demo and oauth_enable, but the seconds of migrating a
    fresh file are paid once rather than per way of stopping it."""
    path = tmp_path_factory.mktemp("make-run-template") / "db.sqlite3"
    env = {
        **_own_environment(),
        "DATABASE_URL": f"sqlite:///{path}",
        "REDIS_URL": f"redis://127.0.0.1:{_free_port()}/0",
    }
    migrate = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert migrate.returncode == 0, migrate.stdout + migrate.stderr
    return path


@pytest.mark.parametrize("how", WAYS)
def test_make_run_leaves_no_child_behind(tmp_path, migrated_database, how):
    """SIGTERM to the group is how a terminal or a supervisor stops it. SIGKILL is what a
    supervisor does when it tired of waiting: the script cannot stop anything then, so the
    kernel tells its children (their parent-death signal). soak/make_run_signals.py also
    runs SIGTERM to make alone, SIGINT, and SIGINT twice."""
    port = _free_port()
    shutil.copyfile(migrated_database, tmp_path / "db.sqlite3")
    env = _own_environment()
    env.update(
        PORT=str(port),
        REDIS_URL=f"redis://127.0.0.1:{_free_port()}/0",  # nothing answers: run.sh starts its own
        DATABASE_URL=f"sqlite:///{tmp_path}/db.sqlite3",
        TOOLBAY_ADMIN_PASSWORD="make-run-test",
        CELERY_CONCURRENCY="1",
    )
    log = tmp_path / "make-run.log"
    make = subprocess.Popen(
        ["make", "--no-print-directory", "run"],
        cwd=ROOT,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:

        def serving() -> bool:
            if make.poll() is not None:
                raise AssertionError(f"make run exited early:\n{log.read_text()}")
            return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200

        wait_for(serving, timeout=240, ignore=(httpx.TransportError,), message=lambda: log.read_text())
        # Uvicorn, the worker (and its pool child and beat), the audit writer, the listener, Redis.
        wait_for(lambda: b"ready." in log.read_bytes(), timeout=60, message=lambda: log.read_text())
        started = _session_members(make.pid)
        assert len(started) >= 7, started
        if how == "SIGTERM to the group":
            os.killpg(make.pid, signal.SIGTERM)
        elif how == "SIGKILL to make and the script":
            for pid in (*child_pids(make.pid), make.pid):  # run.sh, then make
                os.kill(pid, signal.SIGKILL)
        elif how == "SIGTERM to make":
            make.send_signal(signal.SIGTERM)
        else:
            os.killpg(make.pid, signal.SIGINT)
            if how == "SIGINT twice to the group":  # an impatient Ctrl-C while it stops
                wait_for(lambda: b"Stopping" in log.read_bytes(), timeout=30, message=lambda: log.read_text())
                os.killpg(make.pid, signal.SIGINT)
        make.wait(60)
        wait_for(
            lambda: not _session_members(make.pid),
            timeout=30,
            message=lambda: f"processes left: {_session_members(make.pid)}\n{log.read_text()}",
        )
    finally:
        for pid in _session_members(make.pid):
            os.kill(pid, signal.SIGKILL)
