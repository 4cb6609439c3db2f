"""Search mode through the official SDK client against the live servers, on both protocol
revisions: a tenant with GitHub's whole REST API (1,223 tools) lists only the search tool and
its pinned tools, finds the right tool for twenty queries, calls tools it was never listed,
and never finds (nor calls) a tool its credential may not see."""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx2
import pytest
from django.db import connection
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from audit.models import Invocation, Outcome
from tenants.models import Tenant, ToolListing
from tenants.services import api_key_create, tenant_create
from tests.mcp.github_catalog import HELD_OUT, PREFIX, QUERIES, github_description, hit_rates
from tests.mcp.live import LIVE_PAGE_SIZE
from tests.mcp.sdk_modern import RoundRobin
from tests.poll import wait_for, wait_for_async
from tools_app.catalog.models import AccessRule, Tool
from tools_app.catalog.services import (
    access_rule_create,
    access_rule_delete,
    access_rule_grant_pattern,
    catalog_entry_create,
)
from tools_app.imports.openapi.services import ImportOptions, openapi_import, read_source

pytestmark = pytest.mark.live
T = TypeVar("T")

TENANT = "live-search"
DENIED = "gh_issues_*"  # what the "narrow" key may not see
ECHO_SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}


@dataclass
class SearchWorld:
    keys: dict[str, str] = field(default_factory=dict)


@pytest.fixture(scope="module")
def search_world(live_world: Any, django_db_blocker: Any) -> SearchWorld:
    """Committed for the live servers: the tenant in search mode with GitHub's API, a pinned
    tool, a pinning rule, the demo tools (visible, not listed), a key denied the issue tools,
    a key that lists; and another tenant whose private tool matches the same queries."""
    path = github_description()
    world = SearchWorld()
    with django_db_blocker.unblock():
        tenant = tenant_create(slug=TENANT, name="Live Search", tool_listing=ToolListing.SEARCH)
        openapi_import(
            source=read_source(path=str(path)), tenant=tenant, options=ImportOptions(prefix=PREFIX), grant=True
        )
        access_rule_grant_pattern(tenant=tenant, pattern="tag:demo")
        pinned = catalog_entry_create(
            model=Tool,
            tenant=tenant,
            fields={
                "name": "pinned_echo",
                "description": "Echo, pinned next to the search tool.",
                "input_schema": ECHO_SCHEMA,
                "backend_config": {"handler": "demo.echo"},
                "confirmation": "none",
                "always_visible": True,
            },
        )
        access_rule_grant_pattern(tenant=tenant, pattern=pinned.name)
        # A rule that pins one of the imported tools for everyone of the tenant.
        access_rule_create(fields={"tenant": tenant, "tool_pattern": "gh_repos_get", "always_visible": True})
        for label in ("full", "narrow", "lister"):
            listing = ToolListing.LIST if label == "lister" else ""
            key, raw = api_key_create(tenant=tenant, name=f"search {label}", tool_listing=listing)
            world.keys[label] = raw
            if label == "narrow":
                access_rule_create(
                    fields={"effect": AccessRule.Effect.DENY, "tenant": tenant, "tool_pattern": DENIED}, api_keys=[key]
                )
        other = tenant_create(slug="live-search-other", name="Live Search Other", tool_listing=ToolListing.SEARCH)
        catalog_entry_create(
            model=Tool,
            tenant=other,
            fields={
                "name": "other_issue_comment",
                "description": "Add a comment to an issue (another tenant's tool).",
                "input_schema": ECHO_SCHEMA,
                "backend_config": {"handler": "demo.echo"},
            },
        )
        access_rule_grant_pattern(tenant=other, pattern="*")
    return world


async def _search(client: Client, query: str, limit: int = 5) -> list[str]:
    result = await client.call_tool("search_tools", {"query": query, "limit": limit})
    assert result.is_error is False, result.content
    tools = result.structured_content["tools"]
    assert all({"name", "description", "inputSchema"} <= set(tool) for tool in tools)
    return [tool["name"] for tool in tools]


async def _listed(client: Client) -> list[str]:
    names, cursor = [], None
    while True:
        page = await client.list_tools(cursor=cursor)
        names += [tool.name for tool in page.tools]
        cursor = page.next_cursor
        if cursor is None:
            return names


def _legacy(endpoint: str, key: str) -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30)
    return Client(streamable_http_client(endpoint, http_client=http), mode="legacy")


@contextlib.asynccontextmanager
async def _modern(servers: list[Any], key: str) -> AsyncIterator[Client]:
    """2026-07-28, each request to the next server in turn."""
    balancer = RoundRobin([urlsplit(server.url).port or 0 for server in servers])
    headers = {"Authorization": f"Bearer {key}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30, transport=balancer) as http,
        Client(streamable_http_client(servers[0].endpoint(TENANT), http_client=http), mode="auto") as client,
    ):
        yield client


def test_search_mode_lists_the_search_tool_finds_tools_and_calls_them_on_2025_11_25(server, search_world, orm):
    async def scenario() -> dict[str, list[str]]:
        async with _legacy(server.endpoint(TENANT), search_world.keys["full"]) as client:
            assert client.session.protocol_version == "2025-11-25"
            # The search tool first, then the pinned tools: one by its own flag, one by a rule.
            assert await _listed(client) == ["search_tools", "gh_repos_get", "pinned_echo"]
            results = {query: await _search(client, query) for query, _ in QUERIES + HELD_OUT}
            # Tools it was never listed are called by name as usual.
            echoed = await client.call_tool("echo", {"text": "found"})
            assert echoed.is_error is False and echoed.content[0].text == "found"
            # A platform tool not granted to this tenant, another tenant's private tool: never found.
            assert not {"bg_echo", "other_issue_comment"} & set(await _search(client, "bg_echo test tool", 25))
            assert "other_issue_comment" not in await _search(client, "other_issue_comment", 25)
            assert (await _search(client, "gh_pulls_merge"))[0] == "gh_pulls_merge"  # a name finds itself
            bad = await client.call_tool("search_tools", {"query": "", "limit": 500})
            assert bad.is_error is True and "search_tools" in bad.content[0].text
            return results

    results = asyncio.run(scenario())
    # Each search is in the invocation log, as any call.
    searches = Invocation.objects.filter(tenant__slug=TENANT, tool_name="search_tools")
    wait_for(lambda: searches.count() >= len(QUERIES + HELD_OUT) + 4, message="the searches in the invocation log")
    assert searches.filter(outcome=Outcome.INVALID_ARGUMENTS).count() == 1
    first, five = hit_rates(QUERIES, results)
    held_first, held_five = hit_rates(HELD_OUT, results)
    print(f"\nsearch over 1,223 GitHub tools: 20 queries hit@1 {first}/20, hit@5 {five}/20; ", end="")
    print(f"10 held-out queries hit@1 {held_first}/10, hit@5 {held_five}/10")
    for query, wanted in QUERIES + HELD_OUT:
        if results[query][:1] != [wanted]:
            print(f"  {query!r}: wanted {wanted}, got {results[query][:3]}")
    # Measured: 13/20 and 20/20; held out 4/10 and 8/10 (README "Large catalogs"). A ranking
    # change that loses more than a couple of them should be looked at.
    assert five >= 18 and first >= 11 and held_five >= 6


def test_search_never_finds_nor_calls_what_the_key_may_not_see_on_2026_07_28(live_servers, search_world):
    async def scenario() -> None:
        async with _modern(live_servers, search_world.keys["narrow"]) as client:
            assert client.session.protocol_version == "2026-07-28"
            assert await _listed(client) == ["search_tools", "gh_repos_get", "pinned_echo"]
            found: set[str] = set()
            for query, _ in QUERIES:
                found |= set(await _search(client, query, 25))
            found |= set(await _search(client, "issue issues comment label assignee milestone lock", 25))
            assert found and not [name for name in found if fnmatch.fnmatchcase(name, DENIED)]
            with pytest.raises(MCPError, match="Unknown tool"):
                await client.call_tool("gh_issues_create-comment", {"owner": "o", "repo": "r", "issue_number": 1})
            # What it may see is found and called as on the other revision.
            assert "gh_pulls_merge" in await _search(client, "merge a pull request")
            echoed = await client.call_tool("echo", {"text": "modern"})
            assert echoed.content[0].text == "modern"

        # The same query with the full key finds the issue tools the narrow key was denied.
        async with _modern(live_servers, search_world.keys["full"]) as client:
            assert "gh_issues_create-comment" in await _search(client, "add a comment to an issue")

    asyncio.run(scenario())


def test_a_key_can_list_every_tool_while_its_tenant_searches(server, search_world):
    async def scenario() -> None:
        async with _legacy(server.endpoint(TENANT), search_world.keys["lister"]) as client:
            page = await client.list_tools()
            names = [tool.name for tool in page.tools]
            assert len(names) == LIVE_PAGE_SIZE and page.next_cursor is not None and "search_tools" not in names
            assert names == sorted(names)  # every visible tool, by name, paged as before
            with pytest.raises(MCPError, match="Unknown tool"):  # no search tool in list mode
                await client.call_tool("search_tools", {"query": "merge"})

    asyncio.run(scenario())


def test_a_rule_added_mid_session_takes_tools_out_of_search_on_both_servers(live_servers, search_world, orm):
    """Revocation: a deny rule saved while a client searches hides the tools from its very next
    search on either process, and calls to them are refused; lifting it brings them back."""

    async def names(client: Client) -> list[str]:
        return await _search(client, "merge a pull request", 25)

    async def scenario() -> None:
        async with _modern(live_servers, search_world.keys["full"]) as client:
            assert "gh_pulls_merge" in await names(client)
            rule = await asyncio.to_thread(_in_thread, _deny_pulls)
            try:
                # The rule's commit moved the tenant's generation: no stale index on either server.
                for _ in range(len(live_servers)):
                    assert not [name for name in await names(client) if name.startswith("gh_pulls_")]
                with pytest.raises(MCPError, match="Unknown tool"):
                    await client.call_tool("gh_pulls_merge", {"owner": "o", "repo": "r", "pull_number": 1})
            finally:
                await asyncio.to_thread(_in_thread, lambda: access_rule_delete(rule=rule))
            await wait_for_async(
                lambda: _contains(names(client), "gh_pulls_merge"), message="the tools back once the rule is gone"
            )

    asyncio.run(scenario())


async def _contains(found: Awaitable[list[str]], name: str) -> bool:
    return name in await found


def _deny_pulls() -> AccessRule:
    tenant = Tenant.objects.get(slug=TENANT)
    return access_rule_create(fields={"effect": AccessRule.Effect.DENY, "tenant": tenant, "tool_pattern": "gh_pulls_*"})


def _in_thread(write: Callable[[], T]) -> T:
    try:
        return write()
    finally:
        connection.close()  # a thread's connection would keep the test database from being dropped
