"""Probes and metrics: ``/readyz`` (can this process serve?) and ``/metrics`` (Prometheus).

``/healthz`` (in urls.py) only says the process answers; ``/readyz`` also checks that the
database and Redis do, so a load balancer stops sending traffic to a process that cannot
serve it, and says which sandbox packaged servers get (``bubblewrap``, ``unavailable``:
untrusted ones are refused, ``opted-out``: they run unsandboxed). Both answer without
authentication and say nothing beyond ok/failed.

``/metrics`` asks for ``Authorization: Bearer <METRICS_TOKEN>``. Without a token it is open
while ``DEBUG=1`` (a laptop) and answers 403 to everyone with ``DEBUG=0``: the numbers name
tenants and their tools' traffic, so production never serves them to whoever asks.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
from collections.abc import Awaitable

import redis.asyncio as aioredis
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from prometheus_client import REGISTRY
from prometheus_client.exposition import choose_encoder

from audit.journal import JOURNAL_KEY
from audit.models import QuarantinedInvocation
from mcp_platform.endpoint import streams_held
from mcp_platform.metrics import AUDIT_BACKLOG, AUDIT_QUARANTINED, OPEN_STREAMS, QUEUE_LENGTH
from mcp_platform.redis_clients import async_redis
from tools_app.backends.packaged.readiness import packaged_readiness
from tools_app.backends.packaged.sandbox import sandbox_readiness

log = logging.getLogger(__name__)

CELERY_QUEUES = ("toolbay.short", "toolbay.long")
# kombu's Redis transport keeps a queue's messages of priority p > 0 under "<queue>\x06\x16<p>".
_PRIORITY_SUFFIXES = ("", "\x06\x163", "\x06\x166", "\x06\x169")
PROBE_TIMEOUT_SECONDS = 2.0


def _database_ready() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()


async def _check(name: str, probe: Awaitable[object]) -> tuple[str, str]:
    try:
        await asyncio.wait_for(probe, PROBE_TIMEOUT_SECONDS)
    except Exception as exc:
        log.warning("readiness: %s is not reachable: %s", name, exc)
        return name, "failed"
    return name, "ok"


@never_cache
async def readyz(request: HttpRequest) -> JsonResponse:
    checks = dict(
        await asyncio.gather(
            _check("database", sync_to_async(_database_ready)()),
            _check("redis", async_redis().ping()),
        )
    )
    ready = all(state == "ok" for state in checks.values())
    # Said, not checked: a process without a sandbox serves everything but untrusted packages.
    sandbox = await sync_to_async(sandbox_readiness)()  # probed once per process
    body: dict[str, object] = {"status": "ok" if ready else "unavailable", "checks": checks, "sandbox": sandbox}
    if checks["redis"] == "ok":
        # Packaged servers: informative only (no runner does not make a web process unready).
        with contextlib.suppress(Exception):
            body["packaged_servers"] = await asyncio.wait_for(packaged_readiness(), PROBE_TIMEOUT_SECONDS)
    return JsonResponse(body, status=200 if ready else 503)


async def _queue_lengths() -> dict[str, int]:
    broker = settings.CELERY_BROKER_URL
    if not broker.startswith(("redis://", "rediss://", "unix://")):
        return {}
    client = async_redis() if broker == settings.REDIS_URL else aioredis.Redis.from_url(broker, socket_timeout=2)
    try:
        pipe = client.pipeline(transaction=False)
        for queue in CELERY_QUEUES:
            for suffix in _PRIORITY_SUFFIXES:
                pipe.llen(settings.CELERY_BROKER_KEY_PREFIX + queue + suffix)
        lengths = await asyncio.wait_for(pipe.execute(), PROBE_TIMEOUT_SECONDS)
    finally:
        if client is not async_redis():
            await client.aclose()
    per = len(_PRIORITY_SUFFIXES)
    return {queue: sum(lengths[i * per : (i + 1) * per]) for i, queue in enumerate(CELERY_QUEUES)}


def _refusal(request: HttpRequest) -> HttpResponse | None:
    """The answer to a scrape that may not read the metrics; None when it may."""
    token = settings.METRICS_TOKEN
    if not token:
        if settings.DEBUG:
            return None
        return HttpResponse(
            "/metrics is off: set METRICS_TOKEN (DEBUG=0 serves it only to a scrape that sends it)\n",
            status=403,
            content_type="text/plain",
        )
    offered = request.headers.get("Authorization", "")
    if hmac.compare_digest(offered.encode(), f"Bearer {token}".encode()):
        return None
    return HttpResponse("Authorization required\n", status=401, content_type="text/plain")


@never_cache
async def metrics(request: HttpRequest) -> HttpResponse:
    refusal = _refusal(request)
    if refusal is not None:
        return refusal
    OPEN_STREAMS.set(streams_held())  # on the event loop that owns the streams
    try:
        for queue, length in (await _queue_lengths()).items():
            QUEUE_LENGTH.labels(queue).set(length)
    except Exception as exc:  # the scrape still answers; the gauge keeps its last value
        log.warning("metrics: could not read the Celery queue lengths: %s", exc)
    try:
        AUDIT_BACKLOG.set(await asyncio.wait_for(async_redis().xlen(JOURNAL_KEY), PROBE_TIMEOUT_SECONDS))
    except Exception as exc:
        log.warning("metrics: could not read the audit journal's length: %s", exc)
    try:
        # Deployment-wide and durable (the writers run in other processes): the table's size.
        AUDIT_QUARANTINED.set(await QuarantinedInvocation.objects.acount())
    except Exception as exc:
        log.warning("metrics: could not count the quarantined invocation rows: %s", exc)
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))  # text 0.0.4 or OpenMetrics
    body = await sync_to_async(encoder)(REGISTRY)  # tenant slugs come from the database
    return HttpResponse(body, content_type=content_type)
