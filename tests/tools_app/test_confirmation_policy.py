"""Confirmation policies: the annotations' defaults as the spec defines them, rules that only
tighten, what the hot-path cache resolves per caller, and the admin and REST API fields."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from tenants.principal import Principal
from tools_app.catalog.cache import TenantTools
from tools_app.catalog.confirmation import Asker, asker, is_consequential, tightest
from tools_app.catalog.selectors import catalog_snapshot


@pytest.mark.parametrize(
    ("annotations", "consequential"),
    [
        ({}, True),  # readOnlyHint defaults to false, destructiveHint to true
        ({"readOnlyHint": True}, False),
        ({"readOnlyHint": True, "destructiveHint": True}, False),  # destructive means nothing when read-only
        ({"destructiveHint": False}, False),
        ({"readOnlyHint": False, "destructiveHint": True}, True),
        ({"idempotentHint": True}, True),
    ],
)
def test_destructive_reads_the_spec_defaults(annotations: dict[str, bool], consequential: bool) -> None:
    assert is_consequential(annotations) is consequential
    assert asker("destructive", annotations) is (Asker.USER if consequential else Asker.NOBODY)


def test_the_other_policies_ignore_annotations() -> None:
    for hints in ({}, {"readOnlyHint": True}):
        assert asker("none", hints) is Asker.NOBODY
        assert asker("always", hints) is Asker.USER
        assert asker("operator", hints) is Asker.OPERATOR


def test_the_strictest_policy_wins() -> None:
    assert tightest(["none", ""]) == "none"
    assert tightest(["none", "always", "destructive"]) == "always"
    assert tightest(["operator", "none"]) == "operator"


def _policy(principal_key: Any, tenant: Any, name: str) -> str:
    """The policy the hot path applies to this key's calls (the cache's visible set, built
    from the catalog as a request would load it)."""
    key, _ = principal_key
    principal = Principal(tenant.pk, tenant.slug, key.pk, key.name, key.prefix, frozenset())
    visible = TenantTools.of(None, catalog_snapshot(tenant.pk)).visible(principal)  # type: ignore[arg-type]
    return visible.confirmation(visible.by_name[name])


def test_rules_tighten_a_tools_policy_for_the_callers_they_apply_to(db, acme, make_key, make_tool, grant) -> None:
    tool = make_tool("wipe", confirmation="destructive", read_only_hint=True)
    grant(acme, tool)
    ops, other = make_key(acme, "ops"), make_key(acme, "other")
    assert _policy(ops, acme, "wipe") == "destructive"
    # A second rule on the same tool, narrowed to one key, asks an operator for that key only.
    narrowed = grant(acme, tool, keys=[ops[0]])
    narrowed.confirmation = "operator"
    narrowed.save()
    assert _policy(ops, acme, "wipe") == "operator"
    assert _policy(other, acme, "wipe") == "destructive"


def test_a_rule_cannot_loosen_what_the_platform_set(db, acme, make_key, make_tool, grant) -> None:
    make_tool("pay", confirmation="always")
    rule = grant(acme, "pay")
    rule.confirmation = "none"
    rule.save()
    assert _policy(make_key(acme), acme, "pay") == "always"


def test_the_rest_api_reads_and_writes_the_policy(admin_client: Client, acme, make_tool) -> None:
    created = admin_client.post(
        "/api/v1/tools/",
        {"tenant": "acme", "name": "drop_table", "description": "Drops.", "backend_config": {"handler": "demo.echo"}},
        content_type="application/json",
    )
    assert created.status_code == 201, created.content
    assert created.json()["confirmation"] == "destructive"  # the default
    tool_id = created.json()["id"]
    changed = admin_client.patch(
        f"/api/v1/tools/{tool_id}/", {"confirmation": "operator"}, content_type="application/json"
    )
    assert changed.status_code == 200 and changed.json()["confirmation"] == "operator"
    bad = admin_client.patch(f"/api/v1/tools/{tool_id}/", {"confirmation": "maybe"}, content_type="application/json")
    assert bad.status_code == 400 and "confirmation" in bad.json()
    rule = admin_client.post(
        "/api/v1/access-rules/",
        {"effect": "allow", "tool": tool_id, "tenant": "acme", "confirmation": "always"},
        content_type="application/json",
    )
    assert rule.status_code == 201, rule.content
    assert rule.json()["confirmation"] == "always"


def test_the_admin_edits_the_policy_and_its_preview_says_it(admin_client: Client, make_tool) -> None:
    tool = make_tool("purge", confirmation="always")
    page = admin_client.get(f"/admin/tools_app/tool/{tool.pk}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'name="confirmation"' in html
    assert "Confirmation (always): the client&#x27;s user confirms each call before it runs (every call)." in html
    rule_page = admin_client.get("/admin/tools_app/accessrule/add/")
    assert 'name="confirmation"' in rule_page.content.decode()
