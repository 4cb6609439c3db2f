"""Fixture tools of the conformance suite's 2026-07-28 scenarios (``--requirements 2026-07-28``).

The stateless-envelope probes, the multi-round (MRTR) tools with the exact keys and texts
the suite's scenarios expect (shared/docs/mcp-protocol-notes.md §12.7), and a tool with an
``x-mcp-header`` argument. Every handler is ordinary: ``ctx.elicit`` and ``ctx.sample`` are
multi-round on this revision and server→client requests on the legacy one.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from asgiref.sync import sync_to_async

from conformance.handlers.fixtures import fixture_tool
from tools_app.catalog.definitions import PromptDefinition
from tools_app.catalog.models import Prompt, Tool
from tools_app.catalog.services import catalog_entry_update
from tools_app.handlers import EVERY_CATALOG, ToolContext, prompt_handler, tool_handler

NAME_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def _text_of(sampled: dict[str, Any]) -> str:
    content = sampled.get("content")
    return str(content.get("text", "")) if isinstance(content, dict) else json.dumps(content)


async def _ask_name(ctx: ToolContext, key: str = "user_name", message: str = "What is your name?") -> str:
    answer = await ctx.elicit(message, NAME_SCHEMA, key=key)
    content = answer.get("content") or {}
    return str(content.get("name", "")) if answer.get("action") == "accept" else ""


@tool_handler("conformance.missing_capability", catalogs=EVERY_CATALOG)
async def missing_capability(ctx: ToolContext, arguments: dict[str, Any]) -> str:
    sampled = await ctx.sample([{"role": "user", "content": {"type": "text", "text": "Say hi"}}], max_tokens=10)
    return _text_of(sampled)


def _touch_tool(name: str) -> None:
    catalog_entry_update(entry=Tool.objects.get(name=name, tenant=None), changes={})


def _touch_prompt(name: str) -> None:
    catalog_entry_update(entry=Prompt.objects.get(name=name, tenant=None), changes={})


# These two change a platform tool and prompt, which every tenant granted them sees: they are
# the platform catalog's only (the default), never a tenant's to bind.
@tool_handler("conformance.trigger_tool_change")
async def trigger_tool_change(ctx: ToolContext, arguments: dict[str, Any]) -> str:
    # Saving the tool unchanged moves its version: every caller's tool list changes, on every process.
    await sync_to_async(_touch_tool)("test_trigger_tool_change")
    return "The tool list changed."


@tool_handler("conformance.trigger_prompt_change")
async def trigger_prompt_change(ctx: ToolContext, arguments: dict[str, Any]) -> str:
    await sync_to_async(_touch_prompt)("test_simple_prompt")
    return "The prompt list changed."


@prompt_handler("conformance.prompt_with_context", catalogs=EVERY_CATALOG)
async def prompt_with_context(arguments: dict[str, str], *, ctx: ToolContext) -> list[dict[str, Any]]:
    # A prompt that asks its client first: a multi-round result on 2026-07-28.
    schema = {"type": "object", "properties": {"context": {"type": "string"}}, "required": ["context"]}
    answer = await ctx.elicit("What context should the prompt use?", schema, key="user_context")
    context = (answer.get("content") or {}).get("context", "")
    return [{"role": "user", "content": {"type": "text", "text": f"Answer with this context in mind: {context}"}}]


@tool_handler("conformance.ask_name", catalogs=EVERY_CATALOG)
async def ask_name(ctx: ToolContext, arguments: dict[str, Any]) -> str:
    return f"Hello, {await _ask_name(ctx)}!"


@tool_handler("conformance.ask_capital", catalogs=EVERY_CATALOG)
async def ask_capital(ctx: ToolContext, arguments: dict[str, Any]) -> str:
    question = [{"role": "user", "content": {"type": "text", "text": "What is the capital of France?"}}]
    return _text_of(await ctx.sample(question, max_tokens=100, key="capital_question"))


@tool_handler("conformance.ask_roots", catalogs=EVERY_CATALOG)
async def ask_roots(ctx: ToolContext, arguments: dict[str, Any]) -> str:
    roots = await ctx.list_roots(key="client_roots")
    return "Roots: " + ", ".join(str(root.get("uri")) for root in roots)


@tool_handler("conformance.ask_confirmation", catalogs=EVERY_CATALOG)
async def ask_confirmation(ctx: ToolContext, arguments: dict[str, Any]) -> str:
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    answer = await ctx.elicit("Please confirm", schema, key="confirm")
    # Reaching this line on a retry means the server opened and checked the requestState.
    return f"state-ok: confirmed={(answer.get('content') or {}).get('ok')}"


@tool_handler("conformance.ask_three", catalogs=EVERY_CATALOG)
async def ask_three(ctx: ToolContext, arguments: dict[str, Any]) -> str:
    greeting_prompt = [{"role": "user", "content": {"type": "text", "text": "Generate a greeting"}}]
    name, greeting, roots = await asyncio.gather(
        _ask_name(ctx),
        ctx.sample(greeting_prompt, max_tokens=50, key="greeting"),
        ctx.list_roots(key="client_roots"),
    )
    return f"{_text_of(greeting)} {name} ({len(roots)} roots)"


@tool_handler("conformance.ask_twice", catalogs=EVERY_CATALOG)
async def ask_twice(ctx: ToolContext, arguments: dict[str, Any]) -> str:
    name = await _ask_name(ctx, "step1", "Step 1: What is your name?")
    schema = {"type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"]}
    answer = await ctx.elicit("Step 2: What is your favorite color?", schema, key="step2")
    return f"{name} likes {(answer.get('content') or {}).get('color')}"


@tool_handler("conformance.ask_what_is_supported", catalogs=EVERY_CATALOG)
async def ask_what_is_supported(ctx: ToolContext, arguments: dict[str, Any]) -> str:
    # Asks only what the request's client capabilities allow: elicitation, else sampling.
    if ctx.supports("elicitation"):
        return f"Hello, {await _ask_name(ctx)}!"
    question = [{"role": "user", "content": {"type": "text", "text": "What is your name?"}}]
    return f"Hello, {_text_of(await ctx.sample(question, max_tokens=20, key='user_name'))}!"


@tool_handler("conformance.echo_header", catalogs=EVERY_CATALOG)
async def echo_header(ctx: ToolContext, arguments: dict[str, Any]) -> str:
    return f"region={arguments.get('region')}"


TOOLS = [
    fixture_tool(
        "test_missing_capability", "conformance.missing_capability", "Needs the client's sampling capability."
    ),
    fixture_tool("test_streaming_elicitation", "conformance.ask_name", "Asks the user's name (elicitation)."),
    fixture_tool("test_logging_tool", "conformance.logging", "Emits three log messages while running."),
    fixture_tool("test_trigger_tool_change", "conformance.trigger_tool_change", "Changes the tool list."),
    fixture_tool("test_trigger_prompt_change", "conformance.trigger_prompt_change", "Changes the prompt list."),
    fixture_tool("test_input_required_result_elicitation", "conformance.ask_name", "Asks the user's name (MRTR)."),
    fixture_tool("test_input_required_result_sampling", "conformance.ask_capital", "Asks the client's model (MRTR)."),
    fixture_tool("test_input_required_result_list_roots", "conformance.ask_roots", "Asks the client's roots (MRTR)."),
    fixture_tool(
        "test_input_required_result_request_state",
        "conformance.ask_confirmation",
        "Asks for a confirmation; the retry's requestState is checked (MRTR).",
    ),
    fixture_tool(
        "test_input_required_result_multiple_inputs",
        "conformance.ask_three",
        "Asks a name, a greeting and the roots in one round (MRTR).",
    ),
    fixture_tool("test_input_required_result_multi_round", "conformance.ask_twice", "Asks in two rounds (MRTR)."),
    fixture_tool("test_input_required_result_tampered_state", "conformance.ask_name", "Asks the user's name (MRTR)."),
    fixture_tool(
        "test_input_required_result_capabilities",
        "conformance.ask_what_is_supported",
        "Asks only what the client declared it can answer (MRTR).",
    ),
    fixture_tool(
        "test_mcp_header_param",
        "conformance.echo_header",
        "Echoes the region its client mirrors in the Mcp-Param-Region header.",
        {
            "type": "object",
            "properties": {"region": {"type": "string", "x-mcp-header": "Region"}},
            "required": ["region"],
        },
    ),
]

PROMPTS = [
    PromptDefinition(
        name="test_input_required_result_prompt",
        description="Asks its client for the context to use (MRTR on a prompt).",
        handler="conformance.prompt_with_context",
    ),
]
