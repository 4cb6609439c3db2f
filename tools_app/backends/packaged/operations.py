"""What operators see of and do to packaged servers' instances (the console's page): every
instance's status as its runner publishes it, and stop or restart (sent to that runner)."""

from __future__ import annotations

import json
import time
from collections.abc import Collection
from typing import Any

from mcp_platform.redis_clients import sync_redis
from tools_app.backends.packaged import locator

ACTIONS = ("stop", "restart")


def instances_of(tenant_ids: Collection[int] | None) -> list[dict[str, Any]]:
    """Statuses of the instances of these tenants (None: all), newest first, with ``uptime``."""
    redis = sync_redis()
    keys = list(redis.scan_iter(match=locator.status_key("*"), count=500))
    rows: list[dict[str, Any]] = []
    now = time.time()
    for raw in redis.mget(keys) if keys else []:
        if raw is None:
            continue
        try:
            status = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(status, dict) or (tenant_ids is not None and status.get("tenant") not in tenant_ids):
            continue
        started = status.get("started_at")
        status["uptime"] = now - float(started) if started else None
        rows.append(status)
    rows.sort(key=lambda row: (row.get("tenant") or 0, str(row.get("scope"))))
    return rows


def instance_control(*, scope: str, action: str, tenant_ids: Collection[int] | None) -> bool:
    """Ask the runner holding ``scope`` to stop or restart it; False when there is no such
    instance among these tenants' (missing and foreign answer the same)."""
    if action not in ACTIONS:
        return False
    redis = sync_redis()
    raw = redis.get(locator.status_key(scope))
    status = json.loads(raw) if raw else None
    if not isinstance(status, dict) or (tenant_ids is not None and status.get("tenant") not in tenant_ids):
        return False
    redis.rpush(locator.control_key(str(status["runner"])), json.dumps({"scope": scope, "action": action}))
    return True
