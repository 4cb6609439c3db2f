"""The official SDK's client on the 2026-07-28 revision, as the tests drive it.

- ``RoundRobin``: an HTTP transport that sends each request to the next live server, as a
  load balancer would; on the stateless revision nothing ties a request to a process.
- ``TasksExtension``: the client half of the tasks extension (``io.modelcontextprotocol/
  tasks``), written on the SDK's extension seam (it ships none): it claims ``resultType:
  "task"`` results of ``tools/call`` and resolves them by polling ``tasks/get``, answering
  the task's input requests through ``tasks/update`` with the test's ``answer`` function.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

import httpx2
import mcp_types as types
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from pydantic import ConfigDict

from tests.poll import wait_for_async

TASKS = "io.modelcontextprotocol/tasks"
TERMINAL = ("completed", "failed", "cancelled")


class RoundRobin(httpx2.AsyncBaseTransport):
    """Each request goes to the next of ``ports`` (same host and path); ``served`` counts them."""

    def __init__(self, ports: Sequence[int]) -> None:
        self._ports = itertools.cycle(ports)
        self._inner = httpx2.AsyncHTTPTransport()
        self.served: Counter[int] = Counter()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        port = next(self._ports)
        self.served[port] += 1
        request.url = request.url.copy_with(port=port)
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


class TaskIdParams(types.RequestParams):
    task_id: str


class TaskUpdateParams(TaskIdParams):
    input_responses: dict[str, Any]


class TasksGet(types.Request[TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    name_param = "taskId"


class TasksUpdate(types.Request[TaskUpdateParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    name_param = "taskId"


class TasksCancel(types.Request[TaskIdParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    name_param = "taskId"


class TaskCreated(types.Result):
    """A CreateTaskResult: the task's id and state, flat."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"]
    task_id: str
    status: str
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None


class TaskState(types.Result):
    """A tasks/get answer (DetailedTask); its other fields stay as extras."""

    model_config = ConfigDict(extra="allow")
    task_id: str
    status: str
    input_requests: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


Answer = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]


class TasksExtension(ClientExtension):
    identifier = TASKS

    def __init__(self, answer: Answer | None = None, *, timeout: float = 30.0) -> None:
        self._answer = answer
        self._timeout = timeout
        self.created: list[TaskCreated] = []
        self.seen: list[TaskState] = []

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=TaskCreated, resolve=self._resolve)]

    async def _resolve(self, created: TaskCreated, ctx: ClaimContext) -> types.CallToolResult:
        self.created.append(created)
        state = await self.follow(ctx.session, created.task_id)
        if state.status != "completed" or state.result is None:
            raise RuntimeError(f"task {created.task_id} ended {state.status}: {state.error}")
        return types.CallToolResult.model_validate(state.result)

    async def follow(self, session: Any, task_id: str) -> TaskState:
        """Poll until the task ends, answering what it asks on the way."""

        async def ended() -> TaskState | None:
            state = await get(session, task_id)
            self.seen.append(state)
            if state.status in TERMINAL:
                return state
            if state.status == "input_required" and state.input_requests and self._answer is not None:
                answers = {
                    key: await self._answer(request["method"], request.get("params") or {})
                    for key, request in state.input_requests.items()
                }
                await update(session, task_id, answers)
            return None

        return await wait_for_async(ended, timeout=self._timeout, message=f"task {task_id} to end")


async def get(session: Any, task_id: str) -> TaskState:
    return await session.send_request(TasksGet(params=TaskIdParams(task_id=task_id)), TaskState)


async def update(session: Any, task_id: str, answers: dict[str, Any]) -> None:
    params = TaskUpdateParams(task_id=task_id, input_responses=answers)
    await session.send_request(TasksUpdate(params=params), types.EmptyResult)


async def cancel(session: Any, task_id: str) -> None:
    await session.send_request(TasksCancel(params=TaskIdParams(task_id=task_id)), types.EmptyResult)
