"""The fixture tools, resources, resource template and prompts the official MCP
conformance suite's 2025-11-25 scenarios use.

Texts and payloads are the ones the suite's scenarios check (see
shared/docs/mcp-protocol-notes.md §12.5). The handlers change nothing, so any catalog of a
deployment that loads them (the conformance server, the tests) may bind them.
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

from tools_app.catalog.definitions import (
    Pack,
    PromptDefinition,
    ResourceDefinition,
    ResourceTemplateDefinition,
    ToolDefinition,
)
from tools_app.handlers import EVERY_CATALOG, ToolContext, ToolError, resource_handler, tool_handler

PNG_1PX = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
WAV_SILENCE = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="
STEP_SECONDS = 0.05


def _embedded(uri: str, mime_type: str, text: str) -> dict[str, Any]:
    return {"type": "resource", "resource": {"uri": uri, "mimeType": mime_type, "text": text}}


@tool_handler("conformance.simple_text", catalogs=EVERY_CATALOG)
async def simple_text(ctx: ToolContext, arguments: dict[str, Any]) -> str:
    return "This is a simple text response for testing."


@tool_handler("conformance.image", catalogs=EVERY_CATALOG)
async def image(ctx: ToolContext, arguments: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"type": "image", "data": PNG_1PX, "mimeType": "image/png"}]


@tool_handler("conformance.audio", catalogs=EVERY_CATALOG)
async def audio(ctx: ToolContext, arguments: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"type": "audio", "data": WAV_SILENCE, "mimeType": "audio/wav"}]


@tool_handler("conformance.embedded_resource", catalogs=EVERY_CATALOG)
async def embedded_resource(ctx: ToolContext, arguments: dict[str, Any]) -> list[dict[str, Any]]:
    return [_embedded("test://embedded-resource", "text/plain", "This is an embedded resource content.")]


@tool_handler("conformance.mixed", catalogs=EVERY_CATALOG)
async def mixed(ctx: ToolContext, arguments: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"type": "text", "text": "Multiple content types test:"},
        {"type": "image", "data": PNG_1PX, "mimeType": "image/png"},
        _embedded("test://mixed-content-resource", "application/json", '{"test":"data","value":123}'),
    ]


@tool_handler("conformance.logging", catalogs=EVERY_CATALOG)
async def logging_tool(ctx: ToolContext, arguments: dict[str, Any]) -> str:
    for text in ("Tool execution started", "Tool processing data", "Tool execution completed"):
        await ctx.log("info", text)
        await asyncio.sleep(STEP_SECONDS)
    return "Tool with logging executed successfully"


@tool_handler("conformance.error", catalogs=EVERY_CATALOG)
async def error(ctx: ToolContext, arguments: dict[str, Any]) -> str:
    raise ToolError("This tool intentionally returns an error for testing")


@tool_handler("conformance.progress", catalogs=EVERY_CATALOG)
async def progress(ctx: ToolContext, arguments: dict[str, Any]) -> str:
    for value in (0, 50, 100):
        await ctx.report_progress(value, 100)
        await asyncio.sleep(STEP_SECONDS)
    return "Progress test completed"


@tool_handler("conformance.sampling", catalogs=EVERY_CATALOG)
async def sampling(ctx: ToolContext, arguments: dict[str, Any]) -> str:
    reply = await ctx.sample(
        [{"role": "user", "content": {"type": "text", "text": arguments["prompt"]}}], max_tokens=100
    )
    content = reply.get("content")
    text = content.get("text") if isinstance(content, dict) else json.dumps(content)
    return f"LLM response: {text}"


@tool_handler("conformance.elicitation", catalogs=EVERY_CATALOG)
async def elicitation(ctx: ToolContext, arguments: dict[str, Any]) -> str:
    answer = await ctx.elicit(
        arguments["message"],
        {
            "type": "object",
            "properties": {
                "username": {"type": "string", "description": "User's response"},
                "email": {"type": "string", "description": "User's email address"},
            },
            "required": ["username", "email"],
        },
    )
    return f"User response: action={answer.get('action')}, content={json.dumps(answer.get('content'))}"


@tool_handler("conformance.elicitation_defaults", catalogs=EVERY_CATALOG)
async def elicitation_defaults(ctx: ToolContext, arguments: dict[str, Any]) -> str:
    answer = await ctx.elicit(
        "Please review and update the form fields with defaults",
        {
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "User name", "default": "John Doe"},
                "age": {"type": "integer", "description": "User age", "default": 30},
                "score": {"type": "number", "description": "User score", "default": 95.5},
                "status": {
                    "type": "string",
                    "description": "User status",
                    "enum": ["active", "inactive", "pending"],
                    "default": "active",
                },
                "verified": {"type": "boolean", "description": "Verification status", "default": True},
            },
            "required": [],
        },
    )
    return f"Elicitation completed: action={answer.get('action')}, content={json.dumps(answer.get('content'))}"


@tool_handler("conformance.elicitation_enums", catalogs=EVERY_CATALOG)
async def elicitation_enums(ctx: ToolContext, arguments: dict[str, Any]) -> str:
    options = [
        {"const": "value1", "title": "First Option"},
        {"const": "value2", "title": "Second Option"},
        {"const": "value3", "title": "Third Option"},
    ]
    answer = await ctx.elicit(
        "Please select options from the enum fields",
        {
            "type": "object",
            "properties": {
                "untitledSingle": {
                    "type": "string",
                    "description": "Select one option",
                    "enum": ["option1", "option2", "option3"],
                },
                "titledSingle": {"type": "string", "description": "Select one option with titles", "oneOf": options},
                "legacyEnum": {
                    "type": "string",
                    "description": "Select one option (legacy)",
                    "enum": ["opt1", "opt2", "opt3"],
                    "enumNames": ["Option One", "Option Two", "Option Three"],
                },
                "untitledMulti": {
                    "type": "array",
                    "description": "Select multiple options",
                    "items": {"type": "string", "enum": ["option1", "option2", "option3"]},
                },
                "titledMulti": {
                    "type": "array",
                    "description": "Select multiple options with titles",
                    "items": {"anyOf": options},
                },
            },
            "required": [],
        },
    )
    return f"Elicitation completed: action={answer.get('action')}, content={json.dumps(answer.get('content'))}"


@tool_handler("conformance.json_schema_2020_12", catalogs=EVERY_CATALOG)
async def json_schema_2020_12(ctx: ToolContext, arguments: dict[str, Any]) -> str:
    return f"Received: {json.dumps(arguments, sort_keys=True)}"


@tool_handler("conformance.reconnection", catalogs=EVERY_CATALOG)
async def reconnection(ctx: ToolContext, arguments: dict[str, Any]) -> str:
    # Close the response after the priming event; the result is produced afterwards and
    # reaches the client when it reconnects with Last-Event-ID (SEP-1699).
    await ctx.close_stream()
    await asyncio.sleep(0.1)
    return "Reconnection test completed"


def fixture_tool(
    name: str, handler: str, description: str, schema: dict[str, Any] | None = None, **options: Any
) -> ToolDefinition:
    """A tool of the suite's fixtures (every revision's: the 2026-07-28 and tasks ones too);
    ``options`` are further ``ToolDefinition`` fields."""
    # The suite's fixtures change nothing, and the suite expects each call to run at once.
    return ToolDefinition(
        name=name,
        handler=handler,
        description=description,
        input_schema=schema or {"type": "object", "properties": {}},
        confirmation="none",
        **options,
    )


TOOLS = [
    fixture_tool("test_simple_text", "conformance.simple_text", "Returns a simple text response."),
    fixture_tool("test_image_content", "conformance.image", "Returns a 1-pixel PNG image."),
    fixture_tool("test_audio_content", "conformance.audio", "Returns a short WAV audio clip."),
    fixture_tool("test_embedded_resource", "conformance.embedded_resource", "Returns an embedded text resource."),
    fixture_tool("test_multiple_content_types", "conformance.mixed", "Returns text, an image and a resource."),
    fixture_tool("test_tool_with_logging", "conformance.logging", "Emits three log messages while running."),
    fixture_tool("test_error_handling", "conformance.error", "Always returns a tool error."),
    fixture_tool("test_tool_with_progress", "conformance.progress", "Reports progress 0, 50 and 100 of 100."),
    fixture_tool(
        "test_sampling",
        "conformance.sampling",
        "Asks the client's model to answer the prompt (sampling).",
        {
            "type": "object",
            "properties": {"prompt": {"type": "string", "description": "The prompt to sample"}},
            "required": ["prompt"],
        },
    ),
    fixture_tool(
        "test_elicitation",
        "conformance.elicitation",
        "Asks the user for a username and an email (elicitation).",
        {
            "type": "object",
            "properties": {"message": {"type": "string", "description": "The message to show"}},
            "required": ["message"],
        },
    ),
    fixture_tool(
        "test_elicitation_sep1034_defaults",
        "conformance.elicitation_defaults",
        "Elicits a form whose fields carry default values (SEP-1034).",
    ),
    fixture_tool(
        "test_elicitation_sep1330_enums", "conformance.elicitation_enums", "Elicits every enum form of SEP-1330."
    ),
    fixture_tool(
        "json_schema_2020_12_tool",
        "conformance.json_schema_2020_12",
        "Takes arguments described with JSON Schema 2020-12.",
        {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {
                "address": {
                    "$anchor": "addressDef",
                    "type": "object",
                    "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
                }
            },
            "properties": {
                "name": {"type": "string"},
                "address": {"$ref": "#/$defs/address"},
                "contactMethod": {"type": "string", "enum": ["phone", "email"]},
                "phone": {"type": "string"},
                "email": {"type": "string"},
            },
            "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
            "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
            "then": {"required": ["phone"]},
            "else": {"required": ["email"]},
            "additionalProperties": False,
        },
    ),
    fixture_tool(
        "test_reconnection",
        "conformance.reconnection",
        "Closes its stream early and delivers the result on reconnection (SEP-1699).",
    ),
]


@resource_handler("conformance.template_data", catalogs=EVERY_CATALOG)
async def template_data(uri: str, variables: dict[str, str]) -> str:
    item = variables["id"]
    return json.dumps({"id": item, "templateTest": True, "data": f"Data for ID: {item}"}, separators=(",", ":"))


RESOURCES = [
    ResourceDefinition(
        uri="test://static-text",
        name="static-text",
        description="A static text resource.",
        text="This is the content of the static text resource.",
    ),
    ResourceDefinition(
        uri="test://static-binary",
        name="static-binary",
        description="A static binary resource (a 1-pixel PNG).",
        mime_type="image/png",
        blob=base64.b64decode(PNG_1PX),
    ),
    ResourceDefinition(
        uri="test://watched-resource",
        name="watched-resource",
        description="A resource clients can subscribe to.",
        text="This resource is watched for changes.",
    ),
]

TEMPLATES = [
    ResourceTemplateDefinition(
        uri_template="test://template/{id}/data",
        name="template-data",
        description="JSON data for an id.",
        mime_type="application/json",
        handler="conformance.template_data",
    ),
]


def _user(content: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": content}


def _text(text: str) -> dict[str, Any]:
    return _user({"type": "text", "text": text})


PROMPTS = [
    PromptDefinition(
        name="test_simple_prompt",
        description="A simple prompt without arguments.",
        messages=[_text("This is a simple prompt for testing.")],
    ),
    PromptDefinition(
        name="test_prompt_with_arguments",
        description="A prompt with two required arguments.",
        arguments=[
            {"name": "arg1", "description": "First test argument", "required": True},
            {"name": "arg2", "description": "Second test argument", "required": True},
        ],
        messages=[_text("Prompt with arguments: arg1='{{arg1}}', arg2='{{arg2}}'")],
        completions={"arg1": ["testValue1", "testValue2", "other value"]},
    ),
    PromptDefinition(
        name="test_prompt_with_embedded_resource",
        description="A prompt that embeds a resource.",
        arguments=[{"name": "resourceUri", "description": "URI of the resource to embed", "required": True}],
        messages=[
            _user(
                {
                    "type": "resource",
                    "resource": {
                        "uri": "{{resourceUri}}",
                        "mimeType": "text/plain",
                        "text": "Embedded resource content for testing.",
                    },
                }
            ),
            _text("Please process the embedded resource above."),
        ],
    ),
    PromptDefinition(
        name="test_prompt_with_image",
        description="A prompt with an image.",
        messages=[
            _user({"type": "image", "data": PNG_1PX, "mimeType": "image/png"}),
            _text("Please analyze the image above."),
        ],
    ),
]

PACK = Pack(tools=TOOLS, resources=RESOURCES, templates=TEMPLATES, prompts=PROMPTS)
