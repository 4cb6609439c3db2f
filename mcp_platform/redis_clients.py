"""Shared Redis clients: one sync client per process, one async client per event loop.

An asyncio Redis client is bound to the loop that created it, and tests (and some
servers) run several loops over a process's life, so async clients are kept per loop.
"""

from __future__ import annotations

import asyncio
import weakref

import redis
import redis.asyncio as aioredis
from django.conf import settings

_sync_client: redis.Redis | None = None
_async_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, aioredis.Redis] = weakref.WeakKeyDictionary()


def sync_redis() -> redis.Redis:
    global _sync_client
    if _sync_client is None:
        _sync_client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=5, health_check_interval=30)
    return _sync_client


def async_redis() -> aioredis.Redis:
    loop = asyncio.get_running_loop()
    client = _async_clients.get(loop)
    if client is None:
        client = aioredis.Redis.from_url(
            settings.REDIS_URL, socket_connect_timeout=5, health_check_interval=30, max_connections=200
        )
        _async_clients[loop] = client
    return client
