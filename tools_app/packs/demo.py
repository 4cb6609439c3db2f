"""The ``demo`` pack: small useful tools, a resource, a resource template and a prompt that
``seed_demo`` grants to the demo tenant. The handlers are harmless, so every tenant's admins
may bind them to private tools of their own."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from tools_app.catalog.definitions import (
    Pack,
    PromptDefinition,
    ResourceDefinition,
    ResourceTemplateDefinition,
    ToolDefinition,
)
from tools_app.handlers import EVERY_CATALOG, ToolContext, ToolError, resource_handler, tool_handler

COUNTDOWN_STEP_SECONDS = 0.2
SLOW_COUNT_STEP_SECONDS = 0.1


@tool_handler("demo.echo", catalogs=EVERY_CATALOG)
async def echo(ctx: ToolContext, arguments: dict[str, Any]) -> str:
    return str(arguments["text"])


@tool_handler("demo.add", catalogs=EVERY_CATALOG)
async def add(ctx: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"sum": arguments["a"] + arguments["b"]}


@tool_handler("demo.get_time", catalogs=EVERY_CATALOG)
async def get_time(ctx: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    zone_name = arguments.get("timezone", "UTC")
    try:
        zone = ZoneInfo(zone_name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ToolError(f"Unknown time zone {zone_name!r}; use an IANA name such as 'Europe/Paris'.") from None
    now = datetime.now(UTC).astimezone(zone)
    return {"iso": now.isoformat(), "timezone": zone_name, "unix": int(now.timestamp())}


@tool_handler("demo.countdown", catalogs=EVERY_CATALOG)
async def countdown(ctx: ToolContext, arguments: dict[str, Any]) -> str:
    n = arguments["n"]
    for step in range(1, n + 1):
        if ctx.cancelled:
            raise ToolError("Countdown cancelled.")
        await asyncio.sleep(COUNTDOWN_STEP_SECONDS)
        await ctx.report_progress(step, n, f"{n - step} to go")
    return f"Countdown from {n} finished."


@tool_handler("demo.slow_count", catalogs=EVERY_CATALOG)
async def slow_count(ctx: ToolContext, arguments: dict[str, Any]) -> str:
    count = arguments["count"]
    for step in range(1, count + 1):
        if ctx.cancelled:
            raise ToolError(f"Stopped at {step - 1} of {count}: cancelled.")
        await asyncio.sleep(SLOW_COUNT_STEP_SECONDS)
        await ctx.report_progress(step, count, f"counted {step}")
    return f"Counted to {count}."


TOOLS = [
    ToolDefinition(
        name="echo",
        handler="demo.echo",
        title="Echo",
        description="Returns the text you send, unchanged. Useful to test a connection.",
        input_schema={
            "type": "object",
            "properties": {"text": {"type": "string", "description": "The text to send back."}},
            "required": ["text"],
            "additionalProperties": False,
        },
        annotations={"readOnlyHint": True, "idempotentHint": True, "openWorldHint": False},
    ),
    ToolDefinition(
        name="add",
        handler="demo.add",
        title="Add two numbers",
        description="Adds a and b and returns the sum as structured output.",
        input_schema={
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"],
            "additionalProperties": False,
        },
        output_schema={"type": "object", "properties": {"sum": {"type": "number"}}, "required": ["sum"]},
        annotations={"readOnlyHint": True, "idempotentHint": True, "openWorldHint": False},
    ),
    ToolDefinition(
        name="get_time",
        handler="demo.get_time",
        title="Current time",
        description="The current date and time, in UTC or in the IANA time zone you name.",
        input_schema={
            "type": "object",
            "properties": {"timezone": {"type": "string", "description": "IANA zone, e.g. 'Europe/Paris'."}},
            "additionalProperties": False,
        },
        output_schema={
            "type": "object",
            "properties": {"iso": {"type": "string"}, "timezone": {"type": "string"}, "unix": {"type": "integer"}},
            "required": ["iso", "timezone", "unix"],
        },
        annotations={"readOnlyHint": True, "openWorldHint": False},
    ),
    ToolDefinition(
        name="countdown",
        handler="demo.countdown",
        title="Countdown",
        description="Counts down from n, reporting progress at every step (0.2 s each).",
        input_schema={
            "type": "object",
            "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 100}},
            "required": ["n"],
            "additionalProperties": False,
        },
        annotations={"readOnlyHint": True, "openWorldHint": False},
        timeout_seconds=60.0,
    ),
    ToolDefinition(
        name="slow_count",
        handler="demo.slow_count",
        title="Slow count (background)",
        description="Counts to `count` on a background worker, 0.1 s per step, reporting progress at each "
        "step. Can also run as an MCP task.",
        input_schema={
            "type": "object",
            "properties": {"count": {"type": "integer", "minimum": 1, "maximum": 1000}},
            "required": ["count"],
            "additionalProperties": False,
        },
        annotations={"readOnlyHint": True, "idempotentHint": True, "openWorldHint": False},
        timeout_seconds=120.0,
        execution_mode="background",
        task_support="optional",
    ),
]


@resource_handler("demo.time_in", catalogs=EVERY_CATALOG)
async def time_in(uri: str, variables: dict[str, str]) -> str:
    zone_name = variables.get("timezone") or "UTC"
    try:
        zone = ZoneInfo(zone_name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ToolError(f"Unknown time zone {zone_name!r}; use an IANA name such as 'Europe/Paris'.") from None
    return f"It is {datetime.now(UTC).astimezone(zone):%Y-%m-%d %H:%M:%S} in {zone_name}."


ZONES = ["UTC", "Europe/London", "Europe/Paris", "Europe/Berlin", "America/New_York", "America/Los_Angeles",
         "Asia/Tokyo", "Asia/Kolkata", "Australia/Sydney"]  # fmt: skip

RESOURCES = [
    ResourceDefinition(
        uri="demo://readme",
        name="readme",
        title="About this demo",
        description="What the demo tenant offers, in a few lines.",
        mime_type="text/markdown",
        text="# Toolbay demo\n\nTools: echo, add, get_time, countdown, slow_count.\n"
        "Resources: this file, and the time in any zone at demo://time/{timezone}.\n"
        "Prompts: explain (a topic, at the level you pick).\n",
    ),
]

TEMPLATES = [
    ResourceTemplateDefinition(
        uri_template="demo://time/{+timezone}",
        name="time-in-zone",
        title="Time in a zone",
        description="The current time in an IANA time zone, e.g. demo://time/Europe/Paris.",
        mime_type="text/plain",
        handler="demo.time_in",
        completions={"timezone": ZONES},
    ),
]

PROMPTS = [
    PromptDefinition(
        name="explain",
        title="Explain a topic",
        description="Asks the model to explain a topic, optionally at a given level.",
        arguments=[
            {"name": "topic", "description": "What to explain", "required": True},
            {"name": "level", "description": "beginner, intermediate or expert"},
        ],
        messages=[
            {
                "role": "user",
                "content": {
                    "type": "text",
                    "text": "Explain {{topic}}{{#level}} to someone at the {{level}} level{{/level}}, in a few "
                    "short paragraphs.",
                },
            }
        ],
        completions={"level": ["beginner", "intermediate", "expert"]},
    ),
]

PACK = Pack(tools=TOOLS, resources=RESOURCES, templates=TEMPLATES, prompts=PROMPTS)
