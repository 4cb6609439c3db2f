"""The shapes that cross the engine boundary: what a ``ToolHost`` hands the engine about
tools, their results and tasks, as the wire carries them (MCP schema names and keys).

The engine passes them through mostly unread; naming them here says what a host must
return, and lets mypy hold both sides to it. Optional keys are left out rather than null.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]


class ToolExecution(TypedDict):
    taskSupport: Literal["optional", "required"]


class Tool(TypedDict):
    """An MCP Tool, as ``tools/list`` shows it."""

    name: str
    title: NotRequired[str]
    description: NotRequired[str]
    inputSchema: dict[str, Any]
    outputSchema: NotRequired[dict[str, Any]]
    annotations: NotRequired[dict[str, Any]]
    icons: NotRequired[list[dict[str, Any]]]
    # Absent: the tool cannot be called as a task ("forbidden").
    execution: NotRequired[ToolExecution]
    _meta: NotRequired[dict[str, Any]]


class CallToolResult(TypedDict):
    """The result of ``tools/call``: content blocks, and ``structuredContent`` (with the
    same JSON as a text block) for a tool with an output schema. ``isError``: the tool
    failed in a way the model can act on (not a protocol error)."""

    content: list[dict[str, Any]]
    structuredContent: NotRequired[dict[str, Any]]
    isError: NotRequired[bool]
    # 2026-07-28: "complete", or "task" when the host made the call a task.
    resultType: NotRequired[str]
    _meta: NotRequired[dict[str, Any]]


class Task(TypedDict):
    """A 2025-11-25 MCP Task: a task-augmented call's state, not its result."""

    taskId: str
    status: TaskStatus
    statusMessage: NotRequired[str]
    createdAt: str  # ISO 8601
    lastUpdatedAt: str
    ttl: int | None  # milliseconds the task is kept after it ends; None: no limit
    pollInterval: NotRequired[int]


class CreateTaskResult(TypedDict):
    task: Task
    _meta: NotRequired[dict[str, Any]]


class DetailedTask(TypedDict):
    """A 2026-07-28 task (tasks extension): its state, and what the state implies: the
    requests it waits on (input_required), its result (completed) or its error (failed).
    A tools/call the host made a task answers with it (``resultType: "task"``)."""

    resultType: NotRequired[Literal["task"]]
    taskId: str
    status: TaskStatus
    statusMessage: NotRequired[str]
    createdAt: str
    lastUpdatedAt: str
    ttlMs: int | None
    pollIntervalMs: NotRequired[int]
    inputRequests: NotRequired[dict[str, Any]]
    result: NotRequired[CallToolResult]
    error: NotRequired[dict[str, Any]]
