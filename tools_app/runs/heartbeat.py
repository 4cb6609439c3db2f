"""A worker process's heartbeat: ``alive:<worker id>`` in Redis, renewed from a thread.

A thread, not a task on the run's event loop: a handler that blocks the loop is slow, not
dead, and must not be taken for dead. Each process beats under its own id (a forked pool
child gets a new one on its first run), which the runs it takes record.
"""

from __future__ import annotations

import os
import socket
import threading
import time

from django.conf import settings

from mcp_platform.mcp import names
from mcp_platform.mcp.liveness import alive_ttl_ms, new_process_id
from mcp_platform.redis_clients import sync_redis

_KIND = "worker"


class WorkerHeartbeat:
    process_id = ""
    _pid = 0

    @classmethod
    def ensure(cls) -> str:
        """This process's worker id; beats once now and from a thread from then on."""
        if cls._pid != os.getpid():
            cls.process_id, cls._pid = new_process_id(_KIND), os.getpid()
            _beat(cls.process_id)
            threading.Thread(target=_beat_forever, args=(cls.process_id,), name="worker-heartbeat", daemon=True).start()
        return cls.process_id


def _beat(process_id: str) -> None:
    sync_redis().set(names.process_alive_key(process_id), b"1", px=alive_ttl_ms(settings.TOOLBAY_HEARTBEAT_SECONDS))


def _beat_forever(process_id: str) -> None:
    while True:
        time.sleep(settings.TOOLBAY_HEARTBEAT_SECONDS)
        try:
            _beat(process_id)
        except Exception:  # Redis away for a moment: the next beat tries again
            continue


def beating(worker_ids: list[str]) -> dict[str, bool]:
    """Which of these workers still beat. A worker on this machine whose process is gone is
    dead at once (its key outlives it by up to three beats): this is what lets a pool's main
    process rerun the call of a child that died right away."""
    if not worker_ids:
        return {}
    pipe = sync_redis().pipeline(transaction=False)
    for worker_id in worker_ids:
        pipe.exists(names.process_alive_key(worker_id))
    return {
        worker_id: bool(found) and not _gone_here(worker_id)
        for worker_id, found in zip(worker_ids, pipe.execute(), strict=True)
    }


def _gone_here(worker_id: str) -> bool:
    head, pid, _ = worker_id.rsplit("-", 2)
    if head != f"{_KIND}-{socket.gethostname()}" or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
