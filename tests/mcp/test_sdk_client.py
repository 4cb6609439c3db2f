"""The official MCP Python SDK in legacy mode (the initialize handshake, 2025-11-25) against a
live Toolbay server; auto mode, which discovers 2026-07-28, is in test_sdk_modern.py."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2
import pytest
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CreateMessageResult, ElicitResult, TextContent

pytestmark = pytest.mark.live


def _client(endpoint: str, key: str | None, mode: str, **callbacks: Any) -> Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    http = httpx2.AsyncClient(headers=headers, timeout=30)
    return Client(streamable_http_client(endpoint, http_client=http), mode=mode, **callbacks)


def test_legacy_handshake_lists_calls_and_reports_progress(server, live_world):
    async def scenario() -> None:
        progress: list[tuple[float, float | None, str | None]] = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append((value, total, message))

        async with _client(server.endpoint("live-alpha"), live_world.keys["alpha"], "legacy") as client:
            assert client.session.protocol_version == "2025-11-25"
            listed = []
            cursor = None
            while True:  # the live servers page by 3
                page = await client.list_tools(cursor=cursor)
                listed += [tool.name for tool in page.tools]
                cursor = page.next_cursor
                if cursor is None:
                    break
            assert {"echo", "add", "get_time", "countdown", "test_elicitation"} <= set(listed)
            assert listed == sorted(listed)

            echoed = await client.call_tool("echo", {"text": "héllo"})
            assert echoed.is_error is False
            assert echoed.content == [TextContent(type="text", text="héllo")]

            summed = await client.call_tool("add", {"a": 2, "b": 40})
            assert summed.structured_content == {"sum": 42}

            counted = await client.call_tool("countdown", {"n": 3}, progress_callback=on_progress)
            assert counted.content[0].text == "Countdown from 3 finished."
            assert [p[0] for p in progress] == [1, 2, 3]
            assert all(p[1] == 3 for p in progress)

    asyncio.run(scenario())


def test_bad_arguments_are_a_tool_error_naming_the_field(server, live_world):
    async def scenario() -> None:
        async with _client(server.endpoint("live-alpha"), live_world.keys["alpha"], "legacy") as client:
            result = await client.call_tool("add", {"a": "two", "b": 1})
            assert result.is_error is True
            text = result.content[0].text
            assert "'a'" in text and "type" in text

            missing = await client.call_tool("echo", {})
            assert missing.is_error is True
            assert "'text' is a required property" in missing.content[0].text

    asyncio.run(scenario())


def test_elicitation_is_answered_by_the_client(server, live_world):
    async def scenario() -> None:
        asked: list[str] = []

        async def elicit(context: Any, params: Any) -> ElicitResult:
            asked.append(params.message)
            return ElicitResult(action="accept", content={"username": "ada", "email": "ada@example.com"})

        async with _client(
            server.endpoint("live-alpha"), live_world.keys["alpha"], "legacy", elicitation_callback=elicit
        ) as client:
            result = await client.call_tool("test_elicitation", {"message": "Who are you?"})
        assert asked == ["Who are you?"]
        assert result.is_error is False
        assert "ada@example.com" in result.content[0].text

    asyncio.run(scenario())


def test_sampling_is_answered_by_the_client(server, live_world):
    async def scenario() -> None:
        async def sample(context: Any, params: Any) -> CreateMessageResult:
            return CreateMessageResult(role="assistant", content=TextContent(type="text", text="Paris"), model="m")

        async with _client(
            server.endpoint("live-alpha"), live_world.keys["alpha"], "legacy", sampling_callback=sample
        ) as client:
            result = await client.call_tool("test_sampling", {"prompt": "Capital of France?"})
        assert result.content[0].text == "LLM response: Paris"

    asyncio.run(scenario())


def test_unknown_tool_is_a_protocol_error(server, live_world):
    async def scenario() -> None:
        from mcp.shared.exceptions import MCPError

        async with _client(server.endpoint("live-beta"), live_world.keys["beta"], "legacy") as client:
            with pytest.raises(MCPError) as excinfo:
                await client.call_tool("test_elicitation", {"message": "x"})  # exists, but not granted to beta
            assert excinfo.value.error.code == -32602
            assert excinfo.value.error.message == "Unknown tool: test_elicitation"

    asyncio.run(scenario())
