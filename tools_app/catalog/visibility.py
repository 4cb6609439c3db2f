"""Access-rule evaluation: which tools, resources, resource templates and prompts a credential
may list and use.

Pure functions over snapshots so the admin preview, the selectors and the hot-path cache
all answer the same way. The rules, the same for every kind of entry:

- a private entry is only ever visible to its own tenant;
- a rule on one tool targets that tool; a pattern rule targets the entries of its kind
  (tools, resources — templates included —, prompts, or any) whose name matches the glob
  (resources and templates also by URI or URI template), or that carry its ``tag:``;
- a rule applies to a principal when its tenant is empty or the principal's tenant; when
  it names credentials (API keys, OAuth subjects, OAuth groups) the principal is one of
  them (its key is listed, its subject is listed, or it is in a listed group); and its
  scope list is empty or shares a scope with the credential (key or token scopes);
- a tenant-owned rule (``owner`` set) can grant only that tenant's private entries;
- an entry is visible when it is enabled, at least one applicable rule allows it and no
  applicable rule denies it (deny wins; no rule means no access);
- a private entry shadows a platform one with the same name (resources: the same URI);
  the answer is ordered by that key.
"""

from __future__ import annotations

from collections.abc import Iterable
from fnmatch import fnmatchcase
from typing import Protocol, TypeVar

from tenants.principal import Principal
from tools_app.catalog.confirmation import tightest
from tools_app.catalog.spec import RuleSpec, ToolSpec

TAG_PREFIX = "tag:"


class Entry(Protocol):
    """What visibility needs of a tool, resource, resource template or prompt."""

    @property
    def kind(self) -> str: ...

    @property
    def id(self) -> int: ...

    @property
    def tenant_id(self) -> int | None: ...

    @property
    def tags(self) -> frozenset[str]: ...

    @property
    def enabled(self) -> bool: ...

    @property
    def match_names(self) -> tuple[str, ...]: ...

    @property
    def shadow_key(self) -> str: ...


E = TypeVar("E", bound=Entry)


def rule_targets(rule: RuleSpec, entry: Entry) -> bool:
    if rule.tool_id is not None:
        return entry.kind == "tool" and rule.tool_id == entry.id
    if rule.kind not in (entry.kind, "any"):
        return False
    if rule.pattern.startswith(TAG_PREFIX):
        return rule.pattern[len(TAG_PREFIX) :] in entry.tags
    return any(fnmatchcase(name, rule.pattern) for name in entry.match_names)


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


def is_visible(entry: Entry, rules: Iterable[RuleSpec], principal: Principal) -> bool:
    if not entry.enabled:
        return False
    if entry.tenant_id is not None and entry.tenant_id != principal.tenant_id:
        return False
    allowed = False
    for rule in rules:
        if not rule_applies(rule, principal) or not rule_targets(rule, entry):
            continue
        if not rule.allow:
            return False
        if rule.owner_id is not None and entry.tenant_id != rule.owner_id:
            continue  # tenant-managed rules cannot grant platform entries
        allowed = True
    return allowed


def visible_entries(entries: Iterable[E], rules: Iterable[RuleSpec], principal: Principal) -> list[E]:
    rules = list(rules)
    by_key: dict[str, E] = {}
    for entry in entries:
        if not is_visible(entry, rules, principal):
            continue
        current = by_key.get(entry.shadow_key)
        if current is None or (current.tenant_id is None and entry.tenant_id is not None):
            by_key[entry.shadow_key] = entry
    return [by_key[key] for key in sorted(by_key)]


def visible_tools(tools: Iterable[ToolSpec], rules: Iterable[RuleSpec], principal: Principal) -> list[ToolSpec]:
    return visible_entries(tools, rules, principal)


def confirmation_for(tool: ToolSpec, rules: Iterable[RuleSpec], principal: Principal) -> str:
    """The confirmation policy of ``tool`` for ``principal``: the tool's own, tightened by
    every applicable rule on it that names a stricter one (never loosened)."""
    named = (
        rule.confirmation
        for rule in rules
        if rule.confirmation and rule_applies(rule, principal) and rule_targets(rule, tool)
    )
    return tightest((tool.confirmation, *named))


def always_visible(tool: ToolSpec, rules: Iterable[RuleSpec], principal: Principal) -> bool:
    """Whether search mode lists ``tool`` (visible to ``principal``) next to the search tool: the
    tool is pinned, or an applicable allow rule that may grant it is."""
    return tool.always_visible or any(
        rule.always_visible
        and rule.allow
        and (rule.owner_id is None or tool.tenant_id == rule.owner_id)
        and rule_applies(rule, principal)
        and rule_targets(rule, tool)
        for rule in rules
    )
