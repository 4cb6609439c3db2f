"""What a cluster hands Toolbay, read as it should be, in one fresh process (settings are
read once, at start-up): TLS options in DATABASE_URL reach libpq (``sslmode=require`` against
the suite's PostgreSQL), a rediss:// REDIS_URL speaks TLS to a real Redis (redis-py both ways,
the Channels layer and the Celery broker), DATABASE_PGBOUNCER turns server-side cursors off,
and LOG_FORMAT=json writes JSON lines on stdout."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from tests.certificates import throwaway_certificate
from tests.deploy.deployment import ROOT
from tests.poll import wait_for

pytestmark = pytest.mark.live

SUITE_DATABASE_URL = os.environ.get("TOOLBAY_TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/toolbay")

CHECK = """
import asyncio, json, logging
import django
django.setup()
from django.conf import settings
from django.db import connection

out = {}
params = connection.get_connection_params()
out["sslmode"] = params.get("sslmode")
out["no_server_side_cursors"] = settings.DATABASES["default"].get("DISABLE_SERVER_SIDE_CURSORS", False)
try:
    with connection.cursor() as cursor:
        cursor.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        out["database"] = "tls" if cursor.fetchone()[0] else "plain"
except Exception as exc:
    out["database"] = str(exc)

from channels.layers import get_channel_layer
from mcp_platform.celery import app
from mcp_platform.redis_clients import async_redis, sync_redis

out["redis_sync"] = sync_redis().ping()
out["redis_connection"] = type(sync_redis().connection_pool.make_connection()).__name__

async def check():
    out["redis_async"] = await async_redis().ping()
    layer = get_channel_layer()
    name = await layer.new_channel()
    await layer.send(name, {"type": "x.y", "n": 1})
    out["channel_layer"] = (await layer.receive(name))["n"]

asyncio.run(check())
with app.connection_for_write() as conn:
    conn.ensure_connection(max_retries=1)
    out["broker"] = conn.connected
logging.getLogger("toolbay.check").warning("hello %s", "cluster")
print("RESULT " + json.dumps(out))
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def tls_redis(tmp_path: Path):
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("redis-server is not installed (make test installs it)")
    cert, key = throwaway_certificate(tmp_path, "localhost")
    port = _free_port()
    log = tmp_path / "redis.log"
    process = subprocess.Popen(
        [
            *(server, "--port", "0", "--tls-port", str(port), "--dir", str(tmp_path), "--save", ""),
            *("--tls-cert-file", str(cert), "--tls-key-file", str(key), "--tls-ca-cert-file", str(cert)),
            *("--tls-auth-clients", "no", "--appendonly", "no"),
        ],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )

    def up() -> bool:
        if process.poll() is not None:
            pytest.skip(f"this redis-server does not serve TLS: {log.read_text()[-500:]}")
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True

    try:
        wait_for(up, timeout=10, ignore=(OSError,))
        yield port, cert
    finally:
        process.terminate()
        process.wait(10)


def test_the_settings_a_cluster_gives_are_honoured(tls_redis):
    port, cert = tls_redis
    separator = "&" if "?" in SUITE_DATABASE_URL else "?"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "mcp_platform.settings",
        "DEBUG": "1",
        "DATABASE_URL": f"{SUITE_DATABASE_URL}{separator}sslmode=require",
        "DATABASE_PGBOUNCER": "1",
        "REDIS_URL": f"rediss://localhost:{port}/0?ssl_cert_reqs=required&ssl_ca_certs={cert}",
        "LOG_FORMAT": "json",
    }
    env.pop("CELERY_BROKER_URL", None)
    result = subprocess.run(
        [sys.executable, "-c", CHECK], cwd=ROOT, env=env, capture_output=True, text=True, timeout=90
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = (result.stdout + result.stderr).splitlines()
    (answer,) = [json.loads(line.removeprefix("RESULT ")) for line in lines if line.startswith("RESULT ")]
    database = answer.pop("database")
    # TLS when the server offers it; otherwise libpq refused the plain connection, as required.
    assert database == "tls" or "SSL" in database, database
    assert answer == {
        "sslmode": "require",
        "no_server_side_cursors": True,
        "redis_sync": True,
        "redis_connection": "SSLConnection",
        "redis_async": True,
        "channel_layer": 1,
        "broker": True,
    }
    (log,) = [json.loads(line) for line in lines if "hello cluster" in line]
    assert log["level"] == "WARNING" and log["logger"] == "toolbay.check"
    # The same Redis without TLS on the client's side gets no answer: the TLS above was real.
    with pytest.raises(redis.ConnectionError):
        redis.Redis(host="localhost", port=port, socket_timeout=2, socket_connect_timeout=2).ping()
