"""``manage.py audit_writer``: write the invocation journal to the database until stopped,
and what other apps write behind (``mcp_platform.write_behind``: background runs), each on
a thread of its own.

SIGINT or SIGTERM stops it after the batches in hand are written and acknowledged.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from audit.writer import JournalWriter
from mcp_platform import write_behind
from mcp_platform.redis_clients import sync_redis


class Command(BaseCommand):
    help = "Write invocation rows from the Redis audit journal to the database (run at least one)."

    def handle(self, *args: Any, **options: Any) -> None:
        stop = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
        writer = JournalWriter(
            sync_redis(),
            batch_rows=settings.AUDIT_WRITER_BATCH_ROWS,
            claim_idle_seconds=settings.AUDIT_WRITER_CLAIM_IDLE_SECONDS,
            linger_seconds=settings.AUDIT_WRITER_LINGER_MS / 1000,
        )
        others = [
            threading.Thread(target=loop, args=(stop.is_set,), name=f"{name}-writer", daemon=True)
            for name, loop in write_behind.registered().items()
        ]
        for thread in others:
            thread.start()
        writer.run(stop.is_set)
        for thread in others:
            thread.join()
        self.stdout.write(
            f"audit writer {writer.name} stopped: {writer.written} rows written, {writer.quarantined} quarantined"
        )
