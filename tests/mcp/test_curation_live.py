"""Curation over the real ASGI app, with the official SDK client: the model sees the curated
definition, calls it by its curated name, and the backend (inline and on a worker) receives
the fixed value; changing the curation sends list_changed."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx2
import pytest
from django.db import connection
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from mcp_platform.mcp import names
from mcp_platform.redis_clients import sync_redis
from tenants.services import api_key_create, tenant_create
from tests.mcp.watcher import LIST_CHANGED
from tests.poll import wait_for_async
from tools_app.catalog.models import Tool
from tools_app.catalog.services import access_rule_grant_pattern, catalog_entry_create, tool_curate

pytestmark = pytest.mark.live

SOURCE_SCHEMA = {
    "type": "object",
    "properties": {
        "account": {"type": "string"},
        "query": {"type": "string"},
        "status": {"type": "string", "enum": ["open", "closed", "spam"]},
        "limit": {"type": "integer", "minimum": 1, "maximum": 100},
    },
    "required": ["account", "query"],
    "additionalProperties": False,
}
RULES = {
    "account": {"hidden": True, "value": "acme-42"},
    "status": {"enum": ["open", "closed"]},
    "limit": {"default": 25, "maximum": 50},
}


@pytest.fixture(scope="module")
def curated(live_world, django_db_blocker) -> dict[str, Any]:
    """A tenant with two private tools (inline and background) that answer with the arguments
    their backend received, both curated."""
    with django_db_blocker.unblock():
        tenant = tenant_create(slug="live-curate", name="Live Curate")
        _, key = api_key_create(tenant=tenant, name="curate key")
        for name, mode in (("crm_search", "inline"), ("crm_search_bg", "background")):
            tool = catalog_entry_create(
                model=Tool,
                tenant=tenant,
                fields={
                    "name": name,
                    "title": "CRM search",
                    "description": "Full-text search over CRM records (internal API).",
                    "input_schema": SOURCE_SCHEMA,
                    "backend_config": {"handler": "testing.arguments"},
                    "execution_mode": mode,
                    "tags": ["crm"],
                    "confirmation": "none",  # a test tool: it changes nothing
                },
            )
            tool_curate(
                tool=tool,
                fields={
                    "name": name.replace("crm_search", "find_tickets"),
                    "description": "Find support tickets of this account by text.",
                    "arguments": RULES,
                },
            )
        access_rule_grant_pattern(tenant=tenant, pattern="tag:crm")
    return {"key": key}


def _client(endpoint: str, key: str, **kwargs: Any) -> tuple[Client, list[str]]:
    session_ids: list[str] = []

    async def remember_session(response: httpx2.Response) -> None:
        if session_id := response.headers.get("mcp-session-id"):
            session_ids.append(session_id)

    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {key}"}, timeout=30, event_hooks={"response": [remember_session]}
    )
    return Client(streamable_http_client(endpoint, http_client=http), mode="legacy", **kwargs), session_ids


async def _listed(client: Client) -> dict[str, Any]:
    tools: dict[str, Any] = {}
    cursor = None
    while True:  # the live servers page by 3
        page = await client.list_tools(cursor=cursor)
        tools.update((tool.name, tool) for tool in page.tools)
        if (cursor := page.next_cursor) is None:
            return tools


def _received(result: Any) -> dict[str, Any]:
    assert result.is_error is False, result.content
    answer: dict[str, Any] = json.loads(result.content[0].text)
    return answer


def _recurate_in_thread() -> None:
    try:
        tool = Tool.objects.get(name="crm_search", tenant__slug="live-curate")
        tool_curate(tool=tool, fields={"name": "find_tickets", "description": "Reworded.", "arguments": RULES})
    finally:
        connection.close()  # a thread's connection would keep the test database from being dropped


def test_the_model_sees_the_curated_tool_and_the_backend_the_fixed_value(orm, server, live_workers, curated):
    changed = asyncio.Event()

    async def on_message(message: Any) -> None:
        if getattr(getattr(message, "root", message), "method", None) == LIST_CHANGED:
            changed.set()

    async def scenario() -> None:
        client, session_ids = _client(server.endpoint("live-curate"), curated["key"], message_handler=on_message)
        async with client:
            tools = await _listed(client)
            assert set(tools) == {"find_tickets", "find_tickets_bg"}
            tool = tools["find_tickets"]
            assert tool.description == "Find support tickets of this account by text."
            assert tool.title == "CRM search"
            assert tool.input_schema == {
                "type": "object",
                "properties": {
                    "query": {"type": "string"},
                    "status": {"type": "string", "enum": ["open", "closed"]},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 25},
                },
                "required": ["query"],
                "additionalProperties": False,
            }

            for name in ("find_tickets", "find_tickets_bg"):  # inline, then on a worker
                answer = _received(await client.call_tool(name, {"query": "refund", "status": "open"}))
                assert answer == {
                    "received": {"query": "refund", "status": "open", "limit": 25, "account": "acme-42"},
                    "tool_name": name,
                }

            # Refused against the curated schema before the backend runs.
            narrowed = await client.call_tool("find_tickets", {"query": "refund", "status": "spam"})
            assert narrowed.is_error is True and "'status'" in narrowed.content[0].text
            hidden = await client.call_tool("find_tickets", {"query": "refund", "account": "other-7"})
            assert hidden.is_error is True and "account" in hidden.content[0].text
            with pytest.raises(MCPError, match="Unknown tool: crm_search"):  # only the curated name routes
                await client.call_tool("crm_search", {"query": "refund"})

            # A change of the curation reaches the session as list_changed.
            digest = names.session_digest_key(session_ids[0])
            await wait_for_async(lambda: sync_redis().exists(digest), message="the SDK's GET stream")
            await asyncio.to_thread(_recurate_in_thread)
            await asyncio.wait_for(changed.wait(), 10)
            assert (await _listed(client))["find_tickets"].description == "Reworded."

    asyncio.run(scenario())
