"""A tenant's generation in Redis: the number every process compares to drop its caches of
the tenant, so a write through the API must move it on."""

from __future__ import annotations

import redis
from django.conf import settings

from mcp_platform.generations import GENERATION_KEY, tenant_field


def generation(slug: str) -> int:
    value = redis.Redis.from_url(settings.REDIS_URL).hget(GENERATION_KEY, tenant_field(slug))
    return int(value or 0)
