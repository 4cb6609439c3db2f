"""The platform side of the MCP engine: identities from the catalog, tools and tasks."""

from __future__ import annotations

import asyncio
import functools
import time
from typing import Any

from asgiref.sync import sync_to_async
from django.utils import timezone

from audit.models import Invocation
from audit.recorder import invocation, recorder
from mcp_platform.mcp import names
from mcp_platform.mcp.calls import CallLink
from mcp_platform.mcp.host import AuthError
from mcp_platform.mcp.jsonrpc import INVALID_PARAMS, SERVER_ERROR, JsonRpcError
from mcp_platform.redis_clients import async_redis
from tenants.principal import Principal
from tools_app import limits
from tools_app.background import create_task
from tools_app.catalog import AuthFailure, CatalogCache
from tools_app.execution import tool_call
from tools_app.models import ToolRun
from tools_app.runs import RELATED_TASK, cancel_run, run_of, runs_of, task_view
from tools_app.spec import ToolSpec

TASK_NOT_FOUND = "Failed to retrieve task: Task not found"


class PlatformToolHost:
    def __init__(self, cache: CatalogCache) -> None:
        self._cache = cache

    async def authenticate(self, endpoint: str, authorization: str | None) -> Principal:
        try:
            return await self._cache.authenticate(endpoint, authorization)
        except AuthFailure as exc:
            if exc.tenant_id is not None and recorder.allow_denied(f"{exc.tenant_id}:refused"):
                recorder.add(
                    invocation(
                        tenant_id=exc.tenant_id,
                        key_id=None,
                        key_label="(refused credential)",
                        tool_name="",
                        outcome=Invocation.Outcome.DENIED,
                        error_message=exc.message,
                        started_at=timezone.now(),
                    )
                )
            raise AuthError(exc.status, exc.message) from None

    async def _tool(self, identity: Principal, name: str) -> ToolSpec | None:
        return (await self._cache.visible(identity)).by_name.get(name)

    async def list_tools(self, identity: Principal) -> list[dict[str, Any]]:
        visible = await self._cache.visible(identity)
        return [tool.wire for tool in visible.tools]

    async def revalidate(self, identity: Principal) -> Principal | None:
        return await self._cache.revalidate(identity)

    async def visible_digest(self, identity: Principal) -> str:
        return (await self._cache.visible(identity)).digest

    async def task_support(self, identity: Principal, name: str) -> str | None:
        tool = await self._tool(identity, name)
        return tool.task_support if tool is not None else None

    async def call_tool(self, identity: Principal, name: str, arguments: dict[str, Any], link: CallLink) -> Any:
        tool = await self._tool(identity, name)
        started_at, clock = timezone.now(), time.perf_counter()
        record = functools.partial(
            invocation,
            tenant_id=identity.tenant_id,
            key_id=identity.key_id,
            key_label=identity.label,
            session_id=link.session_id,
            client=link.client_info,
            tool_name=name,
            arguments=arguments,
            started_at=started_at,
        )
        if tool is None:
            if recorder.allow_denied(identity.subject):
                recorder.add(record(outcome=Invocation.Outcome.DENIED, error_message="Unknown or forbidden tool"))
            return None
        record = functools.partial(record, tool_id=tool.id, tool_version=tool.version, input_schema=tool.input_schema)
        try:
            holds_slot = await self._take_slot(identity)
        except limits.LimitExceeded as exc:
            recorder.add(record(outcome=Invocation.Outcome.DENIED, error_message=exc.message))
            raise JsonRpcError(SERVER_ERROR, exc.message) from None
        try:
            finished = await tool_call(identity, tool, arguments, link)
        except asyncio.CancelledError:  # interrupted after the cancellation grace period
            recorder.add(record(outcome=Invocation.Outcome.CANCELLED, duration_ms=_ms_since(clock)))
            raise
        finally:
            if holds_slot:
                await limits.release(identity.tenant_id)
        if finished.outcome is not None:  # None: a worker ran it and records it
            outcome = Invocation.Outcome.CANCELLED if link.cancelled.is_set() else finished.outcome
            recorder.add(record(outcome=outcome, error_message=finished.message, duration_ms=_ms_since(clock)))
        return finished.result

    async def _take_slot(self, identity: Principal) -> bool:
        catalog = self._cache.cached(identity)
        if catalog is None:
            return False
        return await limits.acquire(
            identity.tenant_id, per_minute=catalog.calls_per_minute, concurrent=catalog.max_concurrent_calls
        )

    async def create_task(
        self, identity: Principal, name: str, arguments: dict[str, Any], link: CallLink, ttl_ms: int | None
    ) -> dict[str, Any]:
        tool = await self._tool(identity, name)
        if tool is None:
            if recorder.allow_denied(identity.subject):
                recorder.add(
                    invocation(
                        tenant_id=identity.tenant_id,
                        key_id=identity.key_id,
                        key_label=identity.label,
                        session_id=link.session_id,
                        client=link.client_info,
                        tool_name=name,
                        arguments=arguments,
                        outcome=Invocation.Outcome.DENIED,
                        error_message="Unknown or forbidden tool",
                        started_at=timezone.now(),
                        is_task=True,
                    )
                )
            raise JsonRpcError(INVALID_PARAMS, f"Unknown tool: {name}")
        catalog = self._cache.cached(identity)
        if catalog is not None:  # tasks count against the rate; they hold no call slot here
            try:
                await limits.acquire(identity.tenant_id, per_minute=catalog.calls_per_minute, concurrent=None)
            except limits.LimitExceeded as exc:
                raise JsonRpcError(SERVER_ERROR, exc.message) from None
        return await create_task(identity, tool, arguments, link, ttl_ms)

    async def get_task(self, identity: Principal, task_id: str) -> dict[str, Any] | None:
        run = await sync_to_async(run_of)(identity, task_id)
        return task_view(run) if run is not None else None

    async def task_result(self, identity: Principal, task_id: str) -> dict[str, Any]:
        run = await sync_to_async(run_of)(identity, task_id)
        if run is None:
            raise JsonRpcError(INVALID_PARAMS, TASK_NOT_FOUND)
        redis = async_redis()
        while not run.is_terminal:
            # Woken by the run's "done" entry; the timeout re-reads the row in case it was missed.
            await redis.xread({names.run_done_key(task_id): "0-0"}, count=1, block=2000)
            await run.arefresh_from_db()
        related = {RELATED_TASK: {"taskId": run.id}}
        if run.status == ToolRun.Status.CANCELLED:
            raise JsonRpcError(SERVER_ERROR, f"Task {run.id} was cancelled", data={"_meta": related})
        if run.error is not None:
            raise JsonRpcError(
                run.error.get("code", SERVER_ERROR), run.error.get("message", "Task failed"), data=run.error.get("data")
            )
        return {**(run.result or {"content": []}), "_meta": related}

    async def list_tasks(self, identity: Principal, offset: int, limit: int) -> tuple[list[dict[str, Any]], bool]:
        def page() -> list[ToolRun]:
            return list(runs_of(identity).order_by("-created_at", "id")[offset : offset + limit + 1])

        runs = await sync_to_async(page)()
        return [task_view(run) for run in runs[:limit]], len(runs) > limit

    async def cancel_task(self, identity: Principal, task_id: str) -> dict[str, Any]:
        run = await sync_to_async(run_of)(identity, task_id)
        if run is None:
            raise JsonRpcError(INVALID_PARAMS, TASK_NOT_FOUND)
        cancelled = await cancel_run(run.id, "Cancelled by the client (tasks/cancel)")
        await run.arefresh_from_db()
        if not cancelled:
            raise JsonRpcError(INVALID_PARAMS, f"Cannot cancel task: already in terminal status '{run.status}'")
        return task_view(run)


def _ms_since(clock: float) -> float:
    return round((time.perf_counter() - clock) * 1000, 3)
