"""Putting a run on a Celery queue (by task name: the tasks module imports the services
that re-queue runs, so it cannot be imported from them).

Where the broker is the platform's own Redis (the default: ``CELERY_BROKER_URL`` unset),
the message is written by the run's own Redis transaction: ``accepting`` gives the
``LPUSH`` that the accept runs together with the run's hash (one round trip, and a run is
never accepted without being queued nor queued without being accepted). Celery's producer
would instead block the event loop on its own connection for every call (py-spy at 32
sessions: 40 % of the web process's samples were kombu's LPUSH waiting on Redis, which
serialised every other request behind it). The message is the one Celery itself builds
(``create_task_message``) in the envelope kombu's Redis transport writes (``body`` encoded,
``delivery_info``, ``delivery_tag``); a test compares it, field by field, with what
``send_task`` puts on the same queue. With any other broker, ``send_task`` publishes it.
"""

from __future__ import annotations

import base64
import functools
import os
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from celery import current_app
from celery.utils.saferepr import saferepr
from django.conf import settings
from kombu.serialization import dumps
from kombu.utils.json import dumps as json_dumps

from mcp_platform import tracing
from mcp_platform.redis_clients import command_batch
from tools_app.catalog.spec import ToolSpec

EXECUTE_RUN = "tools_app.tasks.execute_run"
LONG_QUEUE = "toolbay.long"
SHORT_QUEUE = "toolbay.short"

Command = tuple[Any, ...]
_PLAIN_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def queue_for(tool: ToolSpec | None) -> str:
    if tool is None:
        return SHORT_QUEUE
    return LONG_QUEUE if tool.timeout_seconds > settings.TOOLBAY_LONG_CALL_SECONDS else SHORT_QUEUE


def _time_limit(tool: ToolSpec | None) -> int | None:
    # Celery's hard limit is only the backstop; the worker enforces timeout and grace itself.
    return None if tool is None else int(tool.timeout_seconds + settings.MCP_CANCEL_GRACE_SECONDS + 30)


def broker_is_platform_redis() -> bool:
    return bool(settings.CELERY_BROKER_URL == settings.REDIS_URL)


def message(run_id: str, queue: str, time_limit: int | None, headers: dict[str, Any] | None = None) -> bytes:
    """The bytes kombu's Redis transport would push for ``execute_run(run_id)`` on ``queue``
    (no result backend: ``ignore_result``; the run's state is the result)."""
    app = current_app
    task_id = str(uuid.uuid4())
    template_headers, template_properties, embed, serializer = _template(time_limit, app.thread_oid, os.getpid())
    # A run id (letters, digits, - and _) is shown by Celery's saferepr as repr shows it.
    argsrepr = repr([run_id]) if _PLAIN_ID.fullmatch(run_id) else saferepr([run_id], app.amqp.argsrepr_maxsize)
    # What create_task_message would give for this task id and run (tests compare them).
    task_headers = {
        **template_headers,
        "id": task_id,
        "root_id": task_id,
        "argsrepr": argsrepr,
        **(headers or {}),
    }
    properties = {**template_properties, "correlation_id": task_id}
    body: tuple[list[str], dict[str, Any], Any] = ([run_id], {}, embed)
    content_type, content_encoding, payload = dumps(body, serializer=serializer)  # type: ignore[no-untyped-call]
    raw = payload.encode() if isinstance(payload, str) else payload
    properties.update(
        delivery_mode=2,  # persistent, as Celery's default queues declare
        delivery_info={"exchange": "", "routing_key": queue},
        priority=0,
        body_encoding="base64",
        delivery_tag=str(uuid.uuid4()),
    )
    envelope = {
        "body": base64.b64encode(raw).decode(),
        "content-encoding": content_encoding,
        "content-type": content_type,
        "headers": task_headers,
        "properties": properties,
    }
    return str(json_dumps(envelope)).encode()  # type: ignore[no-untyped-call]


@functools.lru_cache(maxsize=64)
def _template(time_limit: int | None, reply_to: str, pid: int) -> tuple[dict[str, Any], dict[str, Any], Any, str]:
    """Celery's message for ``execute_run`` with its per-message fields still to fill in:
    building it costs a background call's web process about 0.15 ms (py-spy: Celery's
    configuration lookups and reprs, 9 % of its samples), and only the task id and the run
    differ from one message to the next. Per reply address (one per thread) and process
    (the origin header names the pid); with the task serializer (a configuration lookup
    costs as much again)."""
    headers, properties, body, _ = current_app.amqp.create_task_message(
        "template", EXECUTE_RUN, ["template"], {}, time_limit=time_limit, ignore_result=True, reply_to=reply_to
    )
    return headers, properties, body[2], current_app.conf.task_serializer


def push_command(run_id: str, tool: ToolSpec | None, headers: dict[str, Any] | None = None) -> Command:
    queue = queue_for(tool)
    key = settings.CELERY_BROKER_KEY_PREFIX + queue
    return ("LPUSH", key, message(run_id, queue, _time_limit(tool), headers))


def enqueue(run_id: str, tool: ToolSpec | None) -> None:
    """Queue an existing run from synchronous code (Celery's own producer)."""
    queue = queue_for(tool)
    options: dict[str, Any] = {"ignore_result": True}
    if (limit := _time_limit(tool)) is not None:
        options["time_limit"] = limit
    with _publish_span(run_id, queue) as headers:
        current_app.send_task(EXECUTE_RUN, args=[run_id], queue=queue, headers=headers or None, **options)


@asynccontextmanager
async def accepting(run_id: str, tool: ToolSpec | None) -> AsyncIterator[list[Command]]:
    """Queue a run that the block accepts: yields the commands to run in the accept's own
    Redis transaction (none where the broker is elsewhere: then the run is published once
    the block has accepted it)."""
    with _publish_span(run_id, queue_for(tool)) as headers:
        if broker_is_platform_redis():
            yield [push_command(run_id, tool, headers)]
            return
        commands: list[Command] = []
        yield commands
        enqueue(run_id, tool)


async def queue(run_id: str, tool: ToolSpec | None) -> None:
    """Queue an existing run (a re-run, a recovered run) from async code, without blocking
    the event loop where the broker is the platform's Redis."""
    if not broker_is_platform_redis():
        enqueue(run_id, tool)
        return
    with _publish_span(run_id, queue_for(tool)) as headers:
        await command_batch().one(*push_command(run_id, tool, headers))


@contextmanager
def _publish_span(run_id: str, queue: str) -> Iterator[dict[str, Any]]:
    """The producer span of a publish, when tracing is on; gives the headers that carry its
    context (the worker's consumer span is its child), or none."""
    if not tracing.ENABLED:
        yield {}
        return
    with tracing.span(
        f"{queue} publish",
        kind=tracing.SpanKind.PRODUCER,
        attributes={"messaging.system": "celery", "messaging.destination.name": queue, "toolbay.run.id": run_id},
    ):
        yield dict(tracing.inject({}))
