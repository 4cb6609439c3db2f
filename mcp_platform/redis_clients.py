"""Shared Redis clients: one sync client per process, one async client per event loop.

An asyncio Redis client is bound to the loop that created it, and tests (and some
servers) run several loops over a process's life, so async clients are kept per loop.

Both pools *wait* for a free connection (``REDIS_POOL_TIMEOUT_SECONDS``, then a
``ConnectionError`` that the edge answers with 503) instead of failing at once when
``REDIS_MAX_CONNECTIONS`` are in use: a burst from one client queues rather than turning
other clients' requests into errors. A command that meets a dead pooled connection (Redis
restarted since it was opened) is retried once, at once, on a fresh connection, so the
first request after Redis is back does not fail; while Redis is down, requests fail fast
(its port refuses the connection) instead of backing off for seconds.
"""

from __future__ import annotations

import asyncio
import weakref

import redis
import redis.asyncio as aioredis
from django.conf import settings
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.driver_info import DriverInfo
from redis.retry import Retry

from mcp_platform.redis_batch import CommandBatch

# redis-py looks its own version up in the package metadata for every new connection
# (about 1 ms of CPU, measured under a burst of stream openings); it does not change.
DRIVER = DriverInfo(lib_version=redis.__version__)
# redis-py 8 reads with a 5 s socket timeout by default, as long as the blocking reads here
# (XREAD BLOCK, channels-redis's BZPOPMIN) wait: they would race. Blocking calls wait at
# most 5 s, so 30 s only fires for a Redis that really stopped answering.
SOCKET_TIMEOUT_SECONDS = 30
RETRIES = 1

_sync_client: redis.Redis | None = None
_async_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, aioredis.Redis] = weakref.WeakKeyDictionary()
_batches: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, CommandBatch] = weakref.WeakKeyDictionary()


def sync_redis() -> redis.Redis:
    global _sync_client
    if _sync_client is None:
        pool = redis.BlockingConnectionPool.from_url(
            settings.REDIS_URL,
            max_connections=settings.REDIS_MAX_CONNECTIONS,
            timeout=settings.REDIS_POOL_TIMEOUT_SECONDS,
            socket_connect_timeout=5,
            socket_timeout=SOCKET_TIMEOUT_SECONDS,
            health_check_interval=30,
            driver_info=DRIVER,
            retry=Retry(NoBackoff(), RETRIES),
        )
        _sync_client = redis.Redis(connection_pool=pool)
    return _sync_client


def async_redis() -> aioredis.Redis:
    loop = asyncio.get_running_loop()
    client = _async_clients.get(loop)
    if client is None:
        pool = aioredis.BlockingConnectionPool.from_url(
            settings.REDIS_URL,
            max_connections=settings.REDIS_MAX_CONNECTIONS,
            timeout=settings.REDIS_POOL_TIMEOUT_SECONDS,
            socket_connect_timeout=5,
            socket_timeout=SOCKET_TIMEOUT_SECONDS,
            health_check_interval=30,
            driver_info=DRIVER,
            retry=AsyncRetry(NoBackoff(), RETRIES),
        )
        client = aioredis.Redis(connection_pool=pool)
        _async_clients[loop] = client
    return client


def command_batch() -> CommandBatch:
    """This event loop's batch of hot-path commands (see ``mcp_platform.redis_batch``)."""
    loop = asyncio.get_running_loop()
    batch = _batches.get(loop)
    if batch is None:
        batch = _batches[loop] = CommandBatch(settings.REDIS_URL, timeout_seconds=SOCKET_TIMEOUT_SECONDS)
    return batch
