"""A live runner of packaged MCP servers (``manage.py run_packaged``) for tests, and what tests read
of its instances (their status in Redis)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from django.conf import settings

from tests.mcp.live import ROOT, database_url, stop_together
from tests.poll import wait_for
from tools_app.backends.packaged import locator
from tools_app.backends.packaged.sandbox import sandbox_status

# Installed packages are kept between test runs (var/ is not in git): a re-run installs nothing.
PACKAGE_CACHE = ROOT / "var" / "packages"
TIME_PACKAGE = ("mcp-server-time", "2026.10.19")
EVERYTHING_PACKAGE = ("@modelcontextprotocol/server-everything", "2026.8.31")


def runner_env() -> dict[str, str]:
    env = {"TOOLBAY_PACKAGE_CACHE": str(PACKAGE_CACHE), "TOOLBAY_PACKAGED_START_SECONDS": "60"}
    if not sandbox_status().available:
        # No sandbox on this machine: the tests run the packages unconfined, as an operator who
        # opted out would (the sandbox's own tests cover confinement).
        env["TOOLBAY_SANDBOX_OPTOUT"] = "1"
    return env


@dataclass
class LiveRunner:
    process: subprocess.Popen[bytes]
    log_path: Path

    def stop(self) -> None:
        stop_together([self.process], grace=10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def start_runner(tmp_dir: Path, name: str = "runner", extra_env: dict[str, str] | None = None) -> LiveRunner:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "mcp_platform.settings",
        "DATABASE_URL": database_url(),
        "REDIS_URL": settings.REDIS_URL,
        **runner_env(),
        **(extra_env or {}),
    }
    log_path = tmp_dir / f"{name}.log"
    process = subprocess.Popen(
        [sys.executable, "manage.py", "run_packaged", "--host", "127.0.0.1", "--port", "0"],
        cwd=ROOT,
        env=env,
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
    )
    runner = LiveRunner(process, log_path)

    def serving() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"the runner exited:\n{runner.log()}")
        return "running packaged MCP servers at" in runner.log()

    wait_for(serving, timeout=30, message=lambda: f"the runner to serve; its log:\n{runner.log()}")
    return runner


def instance_status(upstream_id: int, tenant_id: int, user: str | None = None) -> dict[str, Any] | None:
    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        raw = client.get(locator.status_key(locator.scope_of(upstream_id, tenant_id, user)))
    finally:
        client.close()
    return json.loads(raw) if raw else None


def running_pid(upstream_id: int, tenant_id: int) -> int | None:
    status = instance_status(upstream_id, tenant_id)
    return int(status["pid"]) if status and status.get("state") == "running" else None
