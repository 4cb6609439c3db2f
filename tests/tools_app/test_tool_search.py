"""Search mode in process: the words the ranking sees, which tools search mode lists (pinned by
the tool or by a rule, never past the access rules), an index that holds only what the caller
may see, and the setting of the tenant and of each key as the host applies it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest
from asgiref.sync import async_to_sync

from mcp_platform.mcp.calls import CallLink
from mcp_platform.mcp.jsonrpc import JsonRpcError
from tenants.auth import tenant_directory
from tenants.models import Tenant, ToolListing
from tenants.principal import Principal
from tenants.services import api_key_update, tenant_update
from tools_app.catalog.cache import TenantTools, catalog_cache
from tools_app.catalog.search import SEARCH_TOOL_NAME, query_words, words
from tools_app.catalog.selectors import catalog_snapshot
from tools_app.catalog.services import access_rule_create
from tools_app.runs.host import PlatformToolHost


def test_words_split_identifiers_and_meet_across_forms() -> None:
    assert words("listRepoIssues repos_list-for_org HTTPServer") == [
        "list", "repo", "issu", "repo", "list", "org", "http", "server"
    ]  # fmt: skip
    # Forms of one word meet; long forms meet the short ones names use.
    assert words("issues issue") == words("issue issue")
    assert words("created create creating") == ["creat"] * 3
    assert words("repositories organization") == words("repo org")
    assert words("string speed status process") == ["string", "speed", "status", "process"]
    assert words("the of a to") == []


def test_a_query_adds_synonyms_and_a_list_for_plurals_at_half_weight() -> None:
    assert query_words("add a comment") == {"add": 1.0, "comment": 1.0, "creat": 0.5}
    assert query_words("workflow runs of a repository")["list"] == 0.5
    assert "list" not in query_words("delete workflow runs")  # a verb says what to do


def _principal(tenant: Tenant, key: Any = None) -> Principal:
    if key is None:
        return Principal(tenant.pk, tenant.slug, None, "anonymous", "", frozenset())
    return Principal(tenant.pk, tenant.slug, key.pk, key.name, key.prefix, frozenset())


def _visible(tenant: Tenant, principal: Principal) -> Any:
    return TenantTools.of(None, catalog_snapshot(tenant.pk)).visible(principal)  # type: ignore[arg-type]


@pytest.mark.django_db
def test_pinned_tools_are_those_the_caller_sees_pinned_by_the_tool_or_an_allow_rule(
    acme, globex, make_key, make_tool, grant
) -> None:
    ops, other = make_key(acme, "ops")[0], make_key(acme, "other")[0]
    make_tool("pinned", tenant=acme, always_visible=True)
    make_tool("ruled", tenant=acme)
    make_tool("plain", tenant=acme)
    platform = make_tool("platform_tool")
    grant(acme, "*")
    grant(None, platform)
    # Pins "ruled" for ops only; a deny that pins means nothing; a tenant's own rule cannot pin
    # a platform tool (it could not grant one either).
    access_rule_create(fields={"tenant": acme, "tool_pattern": "ruled", "always_visible": True}, api_keys=[ops])
    access_rule_create(fields={"tenant": acme, "effect": "deny", "tool_pattern": "plain", "always_visible": True})
    access_rule_create(fields={"tenant": acme, "owner": acme, "tool_pattern": "platform_tool", "always_visible": True})
    # A pinned tool the key is denied is not listed either.
    access_rule_create(fields={"tenant": acme, "effect": "deny", "tool_pattern": "pinned"}, api_keys=[other])

    as_ops, as_other = _visible(acme, _principal(acme, ops)), _visible(acme, _principal(acme, other))
    assert [t.name for t in as_ops.pinned] == ["pinned", "ruled"]
    assert [t.name for t in as_other.pinned] == []
    assert {t.name for t in as_ops.tools} == {"pinned", "ruled", "platform_tool"}
    assert as_ops.search_digest != as_other.search_digest
    # Another tenant sees none of it.
    grant(globex, "*")
    assert _visible(globex, _principal(globex)).pinned == ()


@pytest.mark.django_db
def test_the_index_holds_only_what_the_caller_may_see(acme, make_key, make_tool, grant) -> None:
    ops, other = make_key(acme, "ops")[0], make_key(acme, "other")[0]
    make_tool("refund_payment", tenant=acme, description="Refund a card payment to the customer.")
    make_tool("list_payments", tenant=acme, description="List the payments of a customer.")
    grant(acme, "*")
    access_rule_create(fields={"tenant": acme, "effect": "deny", "tool_pattern": "refund_*"}, api_keys=[other])
    as_ops, as_other = _visible(acme, _principal(acme, ops)), _visible(acme, _principal(acme, other))
    assert [t.name for t in as_ops.search_index.search("refund a payment", 5)] == ["refund_payment", "list_payments"]
    assert [t.name for t in as_other.search_index.search("refund a payment", 5)] == ["list_payments"]
    assert as_other.search_index.search("refund", 5) == []  # no word of a tool it may not see
    # Nor does its exact name find it (the other words still find what the key may see).
    assert [t.name for t in as_other.search_index.search("refund_payment", 5)] == ["list_payments"]


def _host_view(principal: Principal) -> tuple[list[str], dict[str, Any], str]:
    """What the host answers this caller: the names tools/list shows, a search, the tools digest
    (the tenant's record loaded as authentication would)."""
    host = PlatformToolHost(tenant_directory, catalog_cache)
    tenant_directory.clear()
    catalog_cache.clear()

    async def view() -> tuple[list[str], dict[str, Any], str]:
        assert await tenant_directory.tenant(principal.tenant_slug) is not None
        listed = [tool["name"] for tool in await host.list_tools(principal)]
        # What of a call's link the host reads before it runs a tool (the search tool runs no tool).
        link = SimpleNamespace(session_id="s", stream_id="", stateless=False, protocol_version="", client_info={})
        found = await host.call_tool(principal, SEARCH_TOOL_NAME, {"query": "refund"}, cast(CallLink, link))
        return listed, found, (await host.visible_digests(principal))["tools"]

    return async_to_sync(view)()


@pytest.mark.django_db
def test_the_tenants_setting_and_a_keys_override_choose_list_or_search(acme, make_key, make_tool, grant) -> None:
    make_tool("refund_payment", tenant=acme, description="Refund a card payment.")
    make_tool("pinned", tenant=acme, always_visible=True)
    grant(acme, "*")
    key, _ = make_key(acme, "ops")
    listed, found, listing_digest = _host_view(_principal(acme, key))
    assert listed == ["pinned", "refund_payment"] and found is None  # list mode: no search tool

    tenant_update(tenant=acme, changes={"tool_listing": ToolListing.SEARCH})
    listed, found, search_digest = _host_view(_principal(acme, key))
    assert listed == [SEARCH_TOOL_NAME, "pinned"]
    assert [tool["name"] for tool in found["structuredContent"]["tools"]] == ["refund_payment"]
    assert search_digest != listing_digest  # sessions are told their list changed

    api_key_update(key=key, changes={"tool_listing": ToolListing.LIST})  # the key overrides its tenant
    listed, found, _ = _host_view(_principal(acme, key))
    assert listed == ["pinned", "refund_payment"] and found is None


@pytest.mark.django_db
def test_searches_count_against_the_tenants_call_limit(acme, make_key, make_tool, grant) -> None:
    tenant_update(tenant=acme, changes={"tool_listing": ToolListing.SEARCH, "calls_per_minute": 1})
    make_tool("refund_payment", tenant=acme, description="Refund a card payment.")
    grant(acme, "*")
    principal = _principal(acme, make_key(acme, "ops")[0])
    _, found, _ = _host_view(principal)  # the minute's one call
    assert [tool["name"] for tool in found["structuredContent"]["tools"]] == ["refund_payment"]
    # The next is refused (or, should the minute have just turned, the one after it).
    with pytest.raises(JsonRpcError, match="calls per minute"):
        for _ in range(2):
            _host_view(principal)
