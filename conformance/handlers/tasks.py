"""Fixture tools of the conformance suite's tasks-extension scenarios (SEP-2663, 2026-07-28).

The suite names them and says what each must do (shared/docs/mcp-protocol-notes.md): a
sync-only tool, task-supporting ones that run on a worker (sleep, fail, crash, ask the
client) and one that gathers input through multi-round results before it goes on as a
task. The handlers are ordinary: whether a call becomes a task is the server's decision,
from the tool's task support and the client's declared extension.
"""

from __future__ import annotations

import asyncio
from typing import Any

from conformance.handlers.fixtures import fixture_tool
from mcp_platform.mcp.jsonrpc import INTERNAL_ERROR, JsonRpcError
from tools_app.catalog.definitions import ToolDefinition
from tools_app.handlers import EVERY_CATALOG, ToolContext, ToolError, tool_handler

CONFIRM_SCHEMA = {"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}
NAME_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def _accepted(answer: dict[str, Any], field: str) -> Any:
    return (answer.get("content") or {}).get(field) if answer.get("action") == "accept" else None


@tool_handler("conformance.greet", catalogs=EVERY_CATALOG)
async def greet(ctx: ToolContext, arguments: dict[str, Any]) -> str:
    return f"Hello, {arguments['name']}!"


@tool_handler("conformance.slow_compute", catalogs=EVERY_CATALOG)
async def slow_compute(ctx: ToolContext, arguments: dict[str, Any]) -> str:
    seconds = arguments.get("seconds", 1)
    if await ctx.wait_cancelled(timeout=seconds):
        return "Stopped: the task was cancelled."
    return f"Computed {arguments.get('label', 'result')} in {seconds:g} s."


@tool_handler("conformance.failing_job", catalogs=EVERY_CATALOG)
async def failing_job(ctx: ToolContext, arguments: dict[str, Any]) -> str:
    await ctx.wait_cancelled(timeout=1)
    raise ToolError("The job failed: the input could not be processed.")


@tool_handler("conformance.protocol_error_job", catalogs=EVERY_CATALOG)
async def protocol_error_job(ctx: ToolContext, arguments: dict[str, Any]) -> str:
    raise JsonRpcError(INTERNAL_ERROR, "The job crashed before it could produce a result.")


@tool_handler("conformance.confirm_delete", catalogs=EVERY_CATALOG)
async def confirm_delete(ctx: ToolContext, arguments: dict[str, Any]) -> str:
    filename = arguments.get("filename", "the file")
    answer = await ctx.elicit(f"Delete {filename}?", CONFIRM_SCHEMA, key="confirm")
    return f"Deleted {filename}." if _accepted(answer, "confirm") else f"Kept {filename}."


@tool_handler("conformance.multi_input", catalogs=EVERY_CATALOG)
async def multi_input(ctx: ToolContext, arguments: dict[str, Any]) -> str:
    # Asked together, so both requests are pending at once.
    name, confirm = await asyncio.gather(
        ctx.elicit("What is your name?", NAME_SCHEMA, key="name"),
        ctx.elicit("Shall I go on?", CONFIRM_SCHEMA, key="confirm"),
    )
    return f"name={_accepted(name, 'name')} confirm={_accepted(confirm, 'confirm')}"


@tool_handler("conformance.greet_then_task", catalogs=EVERY_CATALOG)
async def greet_then_task(ctx: ToolContext, arguments: dict[str, Any]) -> str:
    answer = await ctx.elicit("What is your name?", NAME_SCHEMA, key="user_name")
    ctx.continue_as_task()  # the name is gathered: the rest runs as a task, on a worker
    return f"Hello, {_accepted(answer, 'name')}! (greeted by a task)"


def _tool(
    name: str,
    handler: str,
    description: str,
    properties: dict[str, Any] | None = None,
    *,
    task_support: str = "optional",
    execution_mode: str = "background",
    required: tuple[str, ...] = (),
) -> ToolDefinition:
    schema = {"type": "object", "properties": properties or {}, "required": list(required)}
    return fixture_tool(
        name,
        handler,
        description,
        schema,
        task_support=task_support,
        execution_mode=execution_mode,
        timeout_seconds=120.0,
    )


TOOLS = [
    _tool(
        "greet",
        "conformance.greet",
        "Greets by name, at once (never a task).",
        {"name": {"type": "string"}},
        task_support="forbidden",
        execution_mode="inline",
        required=("name",),
    ),
    _tool(
        "slow_compute",
        "conformance.slow_compute",
        "Works for the given seconds, then answers; stops when cancelled.",
        {"seconds": {"type": "number", "minimum": 0, "maximum": 100}, "label": {"type": "string"}},
    ),
    _tool("failing_job", "conformance.failing_job", "Fails after about a second.", task_support="required"),
    _tool("protocol_error_job", "conformance.protocol_error_job", "Ends with a protocol error."),
    _tool(
        "confirm_delete",
        "conformance.confirm_delete",
        "Asks for a confirmation, then deletes (nothing, really).",
        {"filename": {"type": "string"}},
    ),
    _tool("multi_input", "conformance.multi_input", "Asks two questions at once."),
    _tool(
        "test_tool_with_task",
        "conformance.greet_then_task",
        "Asks the user's name, then goes on as a task.",
        task_support="required",
        execution_mode="inline",
    ),
]
