"""Which tools a credential sees: the rules documented at the top of tools_app/access.py."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError

from tenants.models import ApiKey, Tenant
from tenants.principal import Principal
from tests.credentials import principal_of, visible
from tools_app.catalog.models import AccessRule


def principal(tenant: Tenant, key: ApiKey | None = None) -> Principal:
    return principal_of(tenant, key)


def names(p: Principal) -> list[str]:
    return [tool.name for tool in visible(p)]


def test_allow_rule_makes_a_tool_visible(acme, make_key, make_tool, grant) -> None:
    key, _ = make_key(acme)
    grant(acme, make_tool("echo"))
    assert names(principal(acme, key)) == ["echo"]


def test_no_rule_means_no_access(acme, make_key, make_tool) -> None:
    key, _ = make_key(acme)
    make_tool("echo")
    assert names(principal(acme, key)) == []


def test_rule_for_another_tenant_does_not_apply(acme, globex, make_key, make_tool, grant) -> None:
    key, _ = make_key(acme)
    grant(globex, make_tool("echo"))
    assert names(principal(acme, key)) == []


def test_rule_without_tenant_applies_to_every_tenant(acme, globex, make_key, make_tool, grant) -> None:
    make_tool("echo")
    grant(None, "echo")
    assert names(principal(acme, make_key(acme)[0])) == ["echo"]
    assert names(principal(globex, make_key(globex)[0])) == ["echo"]


@pytest.mark.parametrize("deny_target", ["tool", "pattern", "tag"])
def test_deny_wins_over_allow(acme, make_key, make_tool, grant, deny_target: str) -> None:
    key, _ = make_key(acme)
    echo = make_tool("echo", tags=["basic"])
    make_tool("add")
    grant(acme, "*")
    target = {"tool": echo, "pattern": "ec*", "tag": "tag:basic"}[deny_target]
    grant(acme, target, effect="deny")
    assert names(principal(acme, key)) == ["add"]


def test_deny_for_one_key_leaves_other_keys_alone(acme, make_key, make_tool, grant) -> None:
    blocked, _ = make_key(acme, "blocked")
    other, _ = make_key(acme, "other")
    echo = make_tool("echo")
    grant(acme, echo)
    grant(acme, echo, effect="deny", keys=[blocked])
    assert names(principal(acme, blocked)) == []
    assert names(principal(acme, other)) == ["echo"]


def test_key_narrowing(acme, make_key, make_tool, grant) -> None:
    chosen, _ = make_key(acme, "chosen")
    other, _ = make_key(acme, "other")
    grant(acme, make_tool("echo"), keys=[chosen])
    assert names(principal(acme, chosen)) == ["echo"]
    assert names(principal(acme, other)) == []
    assert names(principal(acme)) == []  # anonymous callers hold no key


def test_scope_narrowing(acme, make_key, make_tool, grant) -> None:
    reader, _ = make_key(acme, "reader", scopes=["tools:read", "x"])
    writer, _ = make_key(acme, "writer", scopes=["tools:write"])
    bare, _ = make_key(acme, "bare")
    grant(acme, make_tool("echo"), scopes=["tools:read", "admin"])
    assert names(principal(acme, reader)) == ["echo"]
    assert names(principal(acme, writer)) == []
    assert names(principal(acme, bare)) == []


def test_private_tool_is_never_visible_to_another_tenant(acme, globex, make_key, make_tool, grant) -> None:
    make_tool("secret", tenant=globex)
    grant(None, "*")  # a platform rule granting everything to everyone
    grant(acme, "secret")
    assert names(principal(acme, make_key(acme)[0])) == []
    assert names(principal(globex, make_key(globex)[0])) == ["secret"]


def test_tenant_owned_rule_grants_only_the_tenants_private_tools(acme, make_key, make_tool, grant) -> None:
    key, _ = make_key(acme)
    make_tool("platform-tool")
    make_tool("own-tool", tenant=acme)
    grant(acme, "*", owner=acme)
    assert names(principal(acme, key)) == ["own-tool"]


def test_tenant_owned_rule_cannot_target_a_platform_tool(acme, make_tool) -> None:
    rule = AccessRule(effect="allow", tool=make_tool("platform-tool"), tenant=acme, owner=acme)
    with pytest.raises(ValidationError) as exc:
        rule.full_clean()
    assert "tool" in exc.value.message_dict


def test_tenant_owned_rule_can_deny_a_platform_tool(acme, make_key, make_tool, grant) -> None:
    key, _ = make_key(acme)
    tool = make_tool("platform-tool")
    grant(None, "*")
    grant(acme, tool, effect="deny", owner=acme)
    assert names(principal(acme, key)) == []


def test_tenant_owned_rule_applies_to_its_own_tenant_only(acme, globex, make_tool) -> None:
    rule = AccessRule(effect="deny", tool_pattern="*", tenant=globex, owner=acme)
    with pytest.raises(ValidationError) as exc:
        rule.full_clean()
    assert "tenant" in exc.value.message_dict


def test_tag_and_glob_patterns(acme, make_key, make_tool, grant) -> None:
    key, _ = make_key(acme)
    make_tool("demo.echo")
    make_tool("demo.add")
    make_tool("weather", tags=["outdoor"])
    make_tool("demonstration")
    grant(acme, "demo.*")
    grant(acme, "tag:outdoor")
    assert names(principal(acme, key)) == ["demo.add", "demo.echo", "weather"]


def test_glob_is_case_sensitive_and_anchored(acme, make_key, make_tool, grant) -> None:
    key, _ = make_key(acme)
    make_tool("Echo")
    make_tool("echo2")
    grant(acme, "echo")
    assert names(principal(acme, key)) == []


def test_order_is_by_name_whatever_the_creation_order(acme, make_key, make_tool, grant) -> None:
    key, _ = make_key(acme)
    for name in ["zeta", "alpha", "Mid", "beta"]:
        make_tool(name)
    grant(acme, "*")
    assert names(principal(acme, key)) == ["Mid", "alpha", "beta", "zeta"]
    assert names(principal(acme, key)) == names(principal(acme, key))


def test_private_tool_shadows_platform_tool_of_the_same_name(acme, globex, make_key, make_tool, grant) -> None:
    platform = make_tool("search")
    private = make_tool("search", tenant=acme, description="Acme's own search.")
    grant(None, "search")
    seen = visible(principal(acme, make_key(acme)[0]))
    assert [(t.id, t.description) for t in seen] == [(private.pk, "Acme's own search.")]
    # Globex still gets the platform tool.
    assert [t.id for t in visible(principal(globex, make_key(globex)[0]))] == [platform.pk]


def test_disabled_tool_is_invisible(acme, make_key, make_tool, grant) -> None:
    key, _ = make_key(acme)
    make_tool("echo", enabled=False)
    make_tool("add")
    grant(acme, "*")
    assert names(principal(acme, key)) == ["add"]


def test_anonymous_principal_sees_rules_without_key_or_scope_narrowing(acme, make_key, make_tool, grant) -> None:
    key, _ = make_key(acme)
    make_tool("public")
    make_tool("keyed")
    grant(acme, "public")
    grant(acme, "keyed", keys=[key])
    assert names(principal(acme)) == ["public"]
    assert names(principal(acme, key)) == ["keyed", "public"]


def test_rule_needs_exactly_one_target(db: Any, acme, make_tool) -> None:
    tool = make_tool("echo")
    for rule in (AccessRule(tenant=acme), AccessRule(tenant=acme, tool=tool, tool_pattern="*")):
        with pytest.raises(ValidationError, match="exactly one target"):
            rule.full_clean()
