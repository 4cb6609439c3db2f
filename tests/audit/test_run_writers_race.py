"""Attack: two run writers (each on its own thread with its own PostgreSQL and Redis
connections, two members of the one consumer group) take interleaved versions of the same
runs at the same moment. Every row ends at its newest version (an older one never lands over
a newer), neither writer errs (two batches locking the same rows in opposite orders would
deadlock), and every entry is acknowledged."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

import pytest
import redis
from django.conf import settings
from django.db import connection

from tenants.models import Tenant
from tests.poll import wait_for
from tools_app.runs import store
from tools_app.runs.models import ToolRun
from tools_app.runs.writer import GROUP, RunWriter

RUNS = 4
VERSIONS = 40


def _run(tenant: Tenant, index: int, version: int) -> ToolRun:
    now = datetime.now(UTC)
    return ToolRun(
        id=f"race{index:028d}",
        tenant=tenant,
        subject="s",
        tool_name="t",
        tool_version=1,
        session_id="sess",
        stream_id="st",
        status=ToolRun.Status.COMPLETED if version == VERSIONS else ToolRun.Status.WORKING,
        result={"version": version},
        version=version,
        created_at=now,
        updated_at=now,
    )


@pytest.mark.django_db(transaction=True)
def test_two_writers_upserting_the_same_runs_keep_the_newest_version(acme: Tenant) -> None:
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete(store.CHANGES_KEY)
    # Versions interleaved across runs and, within a batch, runs in varying orders.
    for version in range(1, VERSIONS + 1):
        order = range(RUNS) if version % 2 else reversed(range(RUNS))
        for index in order:
            state = store.hash_of(_run(acme, index, version), None)
            client.xadd(store.CHANGES_KEY, state)
    failures: list[BaseException] = []
    stop = threading.Event()
    writers: list[RunWriter] = []

    def work(name: str) -> None:
        writer = RunWriter(redis.Redis.from_url(settings.REDIS_URL), batch_rows=5, claim_idle_seconds=60, block_ms=50)
        writer.name = name
        writers.append(writer)
        writer.ensure_group()
        try:
            while not stop.is_set():
                writer.step()
        except BaseException as exc:  # the attack's finding: any error at all
            failures.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=work, args=(f"writer-{n}",)) for n in range(2)]
    for thread in threads:
        thread.start()
    try:
        wait_for(lambda: client.xlen(store.CHANGES_KEY) == 0 or failures, message="the stream drained")
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert failures == []
    rows: dict[str, Any] = dict(ToolRun.objects.filter(tenant=acme).values_list("id", "version"))
    assert rows == {f"race{index:028d}": VERSIONS for index in range(RUNS)}
    assert set(ToolRun.objects.values_list("status", flat=True)) == {ToolRun.Status.COMPLETED}
    assert client.xpending(store.CHANGES_KEY, GROUP)["pending"] == 0
    assert sum(writer.written for writer in writers) >= RUNS
