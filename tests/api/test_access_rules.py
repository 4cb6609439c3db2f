"""/api/v1/access-rules/: tenant admins manage the rules their tenant owns; platform admins all."""

from __future__ import annotations

import pytest

from tests.api.generations import generation
from tests.api.pages import ids
from tests.api.roles import ROLES
from tests.credentials import principal_of, visible
from tools_app.catalog.models import AccessRule

pytestmark = pytest.mark.django_db


def visible_names(tenant, key) -> list[str]:
    return [tool.name for tool in visible(principal_of(tenant, key))]


@pytest.fixture
def rules(acme, globex, make_tool, grant) -> dict[str, AccessRule]:
    return {
        "platform": grant(None, "demo.*"),
        "acme": grant(acme, "internal.*", owner=acme),
        "globex": grant(globex, "internal.*", owner=globex),
    }


@pytest.mark.parametrize("role", ROLES)
def test_members_see_the_rules_their_tenant_owns(role, as_role, rules) -> None:
    client = as_role(role)
    assert ids(client.get("/api/v1/access-rules/")) == [rules["acme"].pk]
    for other in ("platform", "globex"):
        assert client.get(f"/api/v1/access-rules/{rules[other].pk}/").status_code == 404


def test_platform_rules_for_the_tenant_stay_hidden(as_role, acme, grant) -> None:
    rule = grant(acme, "demo.echo")  # a platform rule that applies to acme
    assert as_role("owner").get(f"/api/v1/access-rules/{rule.pk}/").status_code == 404


def test_other_tenants_rules_look_missing(globex_admin, client_for, rules) -> None:
    client = client_for(globex_admin)
    rule = rules["acme"]
    assert client.get(f"/api/v1/access-rules/{rule.pk}/").status_code == 404
    assert client.patch(f"/api/v1/access-rules/{rule.pk}/", {"effect": "deny"}, format="json").status_code == 404
    assert client.delete(f"/api/v1/access-rules/{rule.pk}/").status_code == 404
    rule.refresh_from_db()
    assert rule.effect == "allow"


def test_superuser_sees_and_filters_every_rule(superuser, client_for, rules, make_tool, grant, acme) -> None:
    client = client_for(superuser)
    assert ids(client.get("/api/v1/access-rules/")) == [r.pk for r in rules.values()]
    assert ids(client.get("/api/v1/access-rules/?tenant=globex")) == [rules["globex"].pk]
    tool = make_tool("echo")
    deny = grant(acme, tool, effect="deny")
    assert ids(client.get(f"/api/v1/access-rules/?tool={tool.pk}")) == [deny.pk]
    assert ids(client.get("/api/v1/access-rules/?effect=deny")) == [deny.pk]
    assert client.get("/api/v1/access-rules/?tool=x").status_code == 400


@pytest.mark.parametrize(("role", "status"), [("owner", 201), ("admin", 201), ("operator", 403), ("viewer", 403)])
def test_who_creates_rules(role, status, as_role, acme) -> None:
    response = as_role(role).post(
        "/api/v1/access-rules/", {"tenant": "acme", "tool_pattern": "x.*", "effect": "deny"}, format="json"
    )
    assert response.status_code == status
    assert AccessRule.objects.filter(tool_pattern="x.*").exists() == (status == 201)


@pytest.mark.django_db(transaction=True)  # real commits: the change is published after commit
def test_granting_a_private_tool_makes_it_visible(as_role, acme, make_tool, make_key) -> None:
    tool = make_tool("lookup", tenant=acme)
    key, _ = make_key(acme)
    assert visible_names(acme, key) == []
    before = generation("acme")
    response = as_role("admin").post(
        "/api/v1/access-rules/", {"tenant": "acme", "tool": tool.pk, "note": "for the bot"}, format="json"
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["owner"], body["effect"], body["created_by"], body["tool_pattern"]) == (
        "acme",
        "allow",
        "acme-admin",
        "",
    )
    assert visible_names(acme, key) == ["lookup"]
    assert generation("acme") == before + 1

    assert as_role("admin").delete(f"/api/v1/access-rules/{body['id']}/").status_code == 204
    assert visible_names(acme, key) == []


def test_rules_narrowed_to_keys(as_role, acme, make_tool, make_key) -> None:
    make_tool("lookup", tenant=acme)
    bot, _ = make_key(acme, "bot")
    other, _ = make_key(acme, "other")
    response = as_role("owner").post(
        "/api/v1/access-rules/", {"tenant": "acme", "tool_pattern": "lookup", "api_keys": [bot.pk]}, format="json"
    )
    assert response.status_code == 201 and response.json()["api_keys"] == [bot.pk]
    assert visible_names(acme, bot) == ["lookup"] and visible_names(acme, other) == []

    rule_id = response.json()["id"]
    response = as_role("owner").patch(f"/api/v1/access-rules/{rule_id}/", {"api_keys": [other.pk]}, format="json")
    assert response.status_code == 200
    assert visible_names(acme, bot) == [] and visible_names(acme, other) == ["lookup"]


def test_tenant_rules_cannot_grant_platform_tools(as_role, superuser, client_for, acme, make_tool, make_key) -> None:
    tool = make_tool("shared")
    key, _ = make_key(acme)
    # Tenant admins do not see platform tools at all …
    response = as_role("owner").post("/api/v1/access-rules/", {"tenant": "acme", "tool": tool.pk}, format="json")
    assert response.status_code == 400
    assert response.json() == {"tool": [f"There is no tool with the id {tool.pk}."]}
    # … and a grant by pattern has no effect on them.
    response = as_role("owner").post("/api/v1/access-rules/", {"tenant": "acme", "tool_pattern": "*"}, format="json")
    assert response.status_code == 201
    assert visible_names(acme, key) == []
    # A platform admin grants it.
    response = client_for(superuser).post("/api/v1/access-rules/", {"tenant": "acme", "tool": tool.pk}, format="json")
    assert response.status_code == 201 and response.json()["owner"] is None
    assert visible_names(acme, key) == ["shared"]


def test_platform_admin_makes_rules_for_every_tenant(superuser, client_for, acme, globex, make_tool, make_key) -> None:
    make_tool("shared")
    response = client_for(superuser).post("/api/v1/access-rules/", {"tool_pattern": "shared"}, format="json")
    assert response.status_code == 201 and response.json()["tenant"] is None
    for tenant in (acme, globex):
        key, _ = make_key(tenant)
        assert visible_names(tenant, key) == ["shared"]


def test_tenant_and_owner_are_fixed(as_role, rules) -> None:
    rule = rules["acme"]
    response = as_role("owner").patch(f"/api/v1/access-rules/{rule.pk}/", {"tenant": "globex"}, format="json")
    assert response.status_code == 400 and list(response.json()) == ["tenant"]
    response = as_role("owner").patch(f"/api/v1/access-rules/{rule.pk}/", {"owner": None}, format="json")
    assert response.status_code == 400 and list(response.json()) == ["owner"]
    response = as_role("owner").patch(f"/api/v1/access-rules/{rule.pk}/", {"tenant": "acme"}, format="json")
    assert response.status_code == 200


def test_switching_the_target(as_role, acme, make_tool, rules) -> None:
    tool = make_tool("lookup", tenant=acme)
    rule = rules["acme"]
    response = as_role("owner").patch(f"/api/v1/access-rules/{rule.pk}/", {"tool": tool.pk}, format="json")
    assert response.status_code == 200, response.content
    assert (response.json()["tool"], response.json()["tool_pattern"]) == (tool.pk, "")
    response = as_role("owner").patch(f"/api/v1/access-rules/{rule.pk}/", {"tool_pattern": "x*"}, format="json")
    assert (response.json()["tool"], response.json()["tool_pattern"]) == (None, "x*")


@pytest.mark.parametrize(("role", "status"), [("owner", 204), ("admin", 204), ("operator", 403), ("viewer", 403)])
def test_who_deletes_rules(role, status, as_role, rules) -> None:
    rule = rules["acme"]
    assert as_role(role).delete(f"/api/v1/access-rules/{rule.pk}/").status_code == status
    assert AccessRule.objects.filter(pk=rule.pk).exists() == (status != 204)


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"tenant": "acme"}, "tool_pattern", "Give a tool or a tool_pattern."),
        ({"tenant": "acme", "tool_pattern": "x", "tool": "TOOL"}, "tool_pattern", "not both"),
        ({"tool_pattern": "x"}, "tenant", "Name the tenant the rule applies to."),
        ({"tenant": "acme", "tool_pattern": "x", "owner": "globex"}, "owner", "There is no tenant"),
        ({"tenant": "acme", "tool_pattern": "x", "effect": "maybe"}, "effect", "not a valid choice"),
        ({"tenant": "acme", "tool_pattern": "x", "scopes": ["no spaces"]}, "scopes", "Scopes are 1-64"),
        ({"tenant": "acme", "tool_pattern": "x", "api_keys": ["GLOBEX_KEY"]}, "api_keys", "no API key with the id"),
        ({"tenant": "acme", "tool": 999999}, "tool", "There is no tool with the id 999999."),
        ({"tenant": "globex", "tool_pattern": "x"}, "tenant", "There is no tenant with the slug 'globex'"),
    ],
)
def test_validation_errors_name_the_field(as_role, acme, globex, make_tool, make_key, data, field, message) -> None:
    tool = make_tool("lookup", tenant=acme)
    globex_key, _ = make_key(globex)
    data = {**data}
    if data.get("tool") == "TOOL":
        data["tool"] = tool.pk
    if data.get("api_keys") == ["GLOBEX_KEY"]:
        data["api_keys"] = [globex_key.pk]
    response = as_role("owner").post("/api/v1/access-rules/", data, format="json")
    assert response.status_code == 400
    assert list(response.json()) == [field]
    assert message in str(response.json()[field])
    assert not AccessRule.objects.exists()


def test_keys_must_belong_to_the_rules_tenant(superuser, client_for, acme, globex, make_key) -> None:
    globex_key, _ = make_key(globex)
    response = client_for(superuser).post(
        "/api/v1/access-rules/", {"tenant": "acme", "tool_pattern": "x", "api_keys": [globex_key.pk]}, format="json"
    )
    assert response.status_code == 400
    assert response.json() == {"api_keys": ["These keys belong to another tenant: test key."]}


def test_owned_rules_grant_only_their_private_tools(superuser, client_for, acme, globex, make_tool) -> None:
    tool = make_tool("theirs", tenant=globex)
    response = client_for(superuser).post(
        "/api/v1/access-rules/", {"tenant": "acme", "owner": "acme", "tool": tool.pk}, format="json"
    )
    assert response.status_code == 400
    assert response.json() == {"tool": ["Tenant-managed rules can grant only the tenant's private tools."]}
