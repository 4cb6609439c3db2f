"""Access-rule evaluation: which tools a credential may list and call.

Pure functions over snapshots so the admin preview, the selectors and the hot-path cache
all answer the same way. The rules:

- a private tool is only ever visible to its own tenant;
- a rule applies to a principal when its tenant is empty or the principal's tenant; when
  it names credentials (API keys, OAuth subjects, OAuth groups) the principal is one of
  them (its key is listed, its subject is listed, or it is in a listed group); and its
  scope list is empty or shares a scope with the credential (key or token scopes);
- a tenant-owned rule (``owner`` set) can grant only that tenant's private tools;
- a tool is visible when it is enabled, at least one applicable rule allows it and no
  applicable rule denies it (deny wins; no rule means no access);
- the answer is ordered by name; a private tool shadows a platform tool of the same name.
"""

from __future__ import annotations

from collections.abc import Iterable
from fnmatch import fnmatchcase

from tenants.principal import Principal
from tools_app.catalog.spec import RuleSpec, ToolSpec

TAG_PREFIX = "tag:"


def rule_targets(rule: RuleSpec, tool: ToolSpec) -> bool:
    if rule.tool_id is not None:
        return rule.tool_id == tool.id
    if rule.pattern.startswith(TAG_PREFIX):
        return rule.pattern[len(TAG_PREFIX) :] in tool.tags
    return fnmatchcase(tool.name, rule.pattern)


def rule_applies(rule: RuleSpec, principal: Principal) -> bool:
    if rule.tenant_id is not None and rule.tenant_id != principal.tenant_id:
        return False
    if rule.narrowed and not (
        (principal.key_id is not None and principal.key_id in rule.key_ids)
        or (principal.oauth_subject and principal.oauth_subject in rule.subjects)
        or bool(rule.groups & principal.groups)
    ):
        return False
    return not rule.scopes or bool(rule.scopes & principal.scopes)


def is_visible(tool: ToolSpec, rules: Iterable[RuleSpec], principal: Principal) -> bool:
    if not tool.enabled:
        return False
    if tool.tenant_id is not None and tool.tenant_id != principal.tenant_id:
        return False
    allowed = False
    for rule in rules:
        if not rule_applies(rule, principal) or not rule_targets(rule, tool):
            continue
        if not rule.allow:
            return False
        if rule.owner_id is not None and tool.tenant_id != rule.owner_id:
            continue  # tenant-managed rules cannot grant platform tools
        allowed = True
    return allowed


def visible_tools(tools: Iterable[ToolSpec], rules: Iterable[RuleSpec], principal: Principal) -> list[ToolSpec]:
    rules = list(rules)
    by_name: dict[str, ToolSpec] = {}
    for tool in tools:
        if not is_visible(tool, rules, principal):
            continue
        current = by_name.get(tool.name)
        if current is None or (current.tenant_id is None and tool.tenant_id is not None):
            by_name[tool.name] = tool
    return [by_name[name] for name in sorted(by_name)]
