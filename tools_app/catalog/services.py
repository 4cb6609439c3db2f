"""Writes about the catalog: tools, resources, resource templates, prompts and access rules."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import transaction

from tenants.models import ApiKey, Tenant
from tools_app.catalog.definitions import (
    PromptDefinition,
    ResourceDefinition,
    ResourceTemplateDefinition,
    ToolDefinition,
)
from tools_app.catalog.models import AccessRule, Prompt, Resource, ResourceTemplate, Tool
from tools_app.catalog.selectors import platform_rules_targeting


@transaction.atomic
def tool_install(*, definition: ToolDefinition, tags: list[str], tenant: Tenant | None = None) -> Tool:
    """Create or update a tool from a pack definition (idempotent: unchanged tools keep their version)."""
    fields = {
        "title": definition.title,
        "description": definition.description,
        "input_schema": definition.input_schema,
        "output_schema": definition.output_schema,
        "read_only_hint": definition.annotations.get("readOnlyHint"),
        "destructive_hint": definition.annotations.get("destructiveHint"),
        "idempotent_hint": definition.annotations.get("idempotentHint"),
        "open_world_hint": definition.annotations.get("openWorldHint"),
        "tags": tags,
        "backend_kind": Tool.Backend.PYTHON,
        "backend_config": {"handler": definition.handler},
        "execution_mode": definition.execution_mode,
        "task_support": definition.task_support,
        "timeout_seconds": definition.timeout_seconds,
        "confirmation": definition.confirmation,
    }
    tool = Tool.objects.filter(tenant=tenant, name=definition.name).first()
    if tool is None:
        tool = Tool(tenant=tenant, name=definition.name, **fields)
        tool.full_clean()
        tool.save()
        return tool
    changed = [name for name, value in fields.items() if getattr(tool, name) != value]
    if changed:
        for name in changed:
            setattr(tool, name, fields[name])
        tool.full_clean()
        tool.save()
    return tool


def _install(model: type[Any], lookup: dict[str, Any], fields: dict[str, Any]) -> Any:
    """Create or update one catalog row (unchanged rows keep their version)."""
    row = model.objects.filter(**lookup).first()
    if row is None:
        row = model(**lookup, **fields)
    else:
        changed = [name for name, value in fields.items() if getattr(row, name) != value]
        if not changed:
            return row
        for name in changed:
            setattr(row, name, fields[name])
    row.full_clean()
    row.save()
    return row


@transaction.atomic
def resource_install(*, definition: ResourceDefinition, tags: list[str], tenant: Tenant | None = None) -> Resource:
    """Create or update a static resource from a pack definition (idempotent)."""
    fields = {
        "name": definition.name,
        "title": definition.title,
        "description": definition.description,
        "mime_type": definition.mime_type,
        "text": definition.text,
        "blob": definition.blob,
        "tags": tags,
    }
    return _install(Resource, {"tenant": tenant, "uri": definition.uri}, fields)  # type: ignore[no-any-return]


@transaction.atomic
def resource_template_install(
    *, definition: ResourceTemplateDefinition, tags: list[str], tenant: Tenant | None = None
) -> ResourceTemplate:
    """Create or update a resource template (python backend) from a pack definition (idempotent)."""
    fields = {
        "uri_template": definition.uri_template,
        "title": definition.title,
        "description": definition.description,
        "mime_type": definition.mime_type,
        "backend_kind": ResourceTemplate.Backend.PYTHON,
        "backend_config": {"handler": definition.handler},
        "completions": definition.completions,
        "tags": tags,
    }
    return _install(ResourceTemplate, {"tenant": tenant, "name": definition.name}, fields)  # type: ignore[no-any-return]


@transaction.atomic
def prompt_install(*, definition: PromptDefinition, tags: list[str], tenant: Tenant | None = None) -> Prompt:
    """Create or update a prompt from a pack definition (idempotent)."""
    served = {"backend_kind": Prompt.Backend.PYTHON, "backend_config": {"handler": definition.handler}}
    written = {"backend_kind": Prompt.Backend.TEMPLATE, "backend_config": {}}
    fields = {
        "title": definition.title,
        "description": definition.description,
        "arguments": definition.arguments,
        "messages": definition.messages,
        "completions": definition.completions,
        "tags": tags,
        **(served if definition.handler else written),
    }
    return _install(Prompt, {"tenant": tenant, "name": definition.name}, fields)  # type: ignore[no-any-return]


@transaction.atomic
def access_rule_grant_pattern(
    *, tenant: Tenant | None, pattern: str, note: str = "", kind: str = AccessRule.Kind.TOOL
) -> AccessRule:
    """An allow rule for a pattern, matching entries of ``kind`` (idempotent)."""
    rule, _ = AccessRule.objects.get_or_create(
        effect=AccessRule.Effect.ALLOW,
        kind=kind,
        tool=None,
        tool_pattern=pattern,
        tenant=tenant,
        owner=None,
        defaults={"note": note},
    )
    return rule


def tool_check(tool: Tool) -> None:
    """Raise ValidationError (messages per field) unless ``tool`` could be saved as it is.

    The same checks as the admin's form: field types and ranges, the schema and backend
    checks of ``tool_field_errors``, and a name that is free in its catalog. Saves nothing,
    so it doubles as the API's dry run.
    """
    # ValidationErrors from full_clean, then messages of our own: ValidationError takes both.
    errors: dict[str, list[Any]] = {}
    try:
        # The unique constraints' generic message names the constraint; the check below
        # says which catalog the name clashes in.
        tool.full_clean(validate_constraints=False)
    except ValidationError as exc:
        errors = exc.update_error_dict(errors)
    if "name" not in errors and "tenant" not in errors:
        # tenant_id=None is the platform catalog (IS NULL); django-stubs rejects None in a lookup.
        clashes = Tool.objects.filter(name=tool.name, tenant_id=tool.tenant_id).exclude(pk=tool.pk)  # type: ignore[misc]
        if clashes.exists():
            where = "the platform catalog" if tool.tenant_id is None else f"tenant {tool.tenant}"
            errors["name"] = [f"A tool named {tool.name!r} already exists in {where}."]
    if errors:
        raise ValidationError(errors)


@transaction.atomic
def tool_create(*, tenant: Tenant | None, fields: dict[str, Any]) -> Tool:
    """A new tool, private to ``tenant`` or (None) in the platform catalog."""
    tool = Tool(tenant=tenant, **fields)
    tool_check(tool)
    tool.save()
    return tool


@transaction.atomic
def tool_update(*, tool: Tool, changes: dict[str, Any]) -> Tool:
    """Apply ``changes`` to a tool's fields; its version moves on with the save."""
    for name, value in changes.items():
        setattr(tool, name, value)
    tool_check(tool)
    tool.save()
    return tool


@transaction.atomic
def tool_delete(*, tool: Tool) -> None:
    tool.delete()


def tool_check_platform_rules(*, tool: Tool, changes: dict[str, Any] | None = None) -> None:
    """For a tenant admin's write: raise ValidationError when deleting ``tool`` (``changes``
    None), or renaming or moving it to another tenant, would take it away from the platform
    rules that target it by id.

    Such a rule (a platform deny, a ``confirmation: always``) is the platform's decision about
    that tool; deleting the tool would delete the rule with it, and a tool re-created under the
    same name would run without it. Platform admins may still do either.
    """
    if tool.pk is None:
        return
    if changes is not None:
        renamed = "name" in changes and changes["name"] != tool.name
        moved = "tenant" in changes and getattr(changes["tenant"], "pk", None) != tool.tenant_id
        if not (renamed or moved):
            return
    rules = list(platform_rules_targeting([tool])[:6])
    if not rules:
        return
    named = "; ".join(f"#{rule.pk} {rule}" for rule in rules[:5]) + (" and more" if len(rules) > 5 else "")
    what = "deleted" if changes is None else "renamed or moved"
    message = (
        f"Platform access rules target this tool ({named}): it cannot be {what} while they do. "
        "Ask a platform admin to remove those rules first."
    )
    raise ValidationError(message if changes is None else {"name": [message]})


def access_rule_check(rule: AccessRule, api_keys: Iterable[ApiKey]) -> None:
    """Raise ValidationError (per field) unless ``rule`` with these keys could be saved."""
    # ValidationErrors from full_clean, then messages of our own: ValidationError takes both.
    errors: dict[str, list[Any]] = {}
    try:
        # clean() states both check constraints in words; their own messages only name them.
        rule.full_clean(validate_constraints=False)
    except ValidationError as exc:
        errors = exc.update_error_dict(errors)
    if rule.tenant_id is not None:
        strangers = sorted(key.name for key in api_keys if key.tenant_id != rule.tenant_id)
        if strangers:
            errors.setdefault("api_keys", []).append(f"These keys belong to another tenant: {', '.join(strangers)}.")
    if errors:
        raise ValidationError(errors)


@transaction.atomic
def access_rule_create(
    *, fields: dict[str, Any], api_keys: list[ApiKey] | None = None, created_by: User | None = None
) -> AccessRule:
    """A new rule; ``fields`` are the model's (effect, tool, tool_pattern, tenant, owner, scopes, note)."""
    rule = AccessRule(**fields, created_by=created_by)
    access_rule_check(rule, api_keys or [])
    rule.save()
    if api_keys:
        rule.api_keys.set(api_keys)
    return rule


@transaction.atomic
def access_rule_update(
    *, rule: AccessRule, changes: dict[str, Any], api_keys: list[ApiKey] | None = None
) -> AccessRule:
    """Apply ``changes``; ``api_keys`` (when not None) replaces the rule's key list."""
    for name, value in changes.items():
        setattr(rule, name, value)
    access_rule_check(rule, rule.api_keys.all() if api_keys is None else api_keys)
    rule.save()
    if api_keys is not None:
        rule.api_keys.set(api_keys)
    return rule


@transaction.atomic
def access_rule_delete(*, rule: AccessRule) -> None:
    rule.delete()


@transaction.atomic
def access_rules_disable_unnarrowed(*, rule_ids: Iterable[int]) -> list[AccessRule]:
    """Disable those of ``rule_ids`` that no longer name any credential (key, OAuth subject or group).

    Called once API keys are gone: a rule narrowed to keys that all disappeared would otherwise
    apply to every credential of its tenant (or of every tenant), so deleting a key would widen
    a platform rule. Disabling keeps what the rule applied to (no one is left) and leaves the
    rule for a platform admin to narrow again. Each is saved, so the change audit records it,
    attributed to whoever deleted the key.
    """
    disabled = []
    for rule in AccessRule.objects.select_for_update().filter(pk__in=list(rule_ids), enabled=True):
        if rule.oauth_subjects or rule.oauth_groups or rule.api_keys.exists():
            continue
        rule.enabled = False
        rule.save(update_fields=["enabled", "updated_at"])
        disabled.append(rule)
    return disabled


CatalogEntryModel = Resource | ResourceTemplate | Prompt


def catalog_entry_check(entry: CatalogEntryModel) -> None:
    """Raise ValidationError (per field) unless the resource, template or prompt could be saved:
    its fields, its backend settings and a URI or name free in its catalog."""
    errors: dict[str, list[Any]] = {}
    try:
        entry.full_clean(validate_constraints=False)
    except ValidationError as exc:
        errors = exc.update_error_dict(errors)
    key = "uri" if isinstance(entry, Resource) else "name"
    if key not in errors and "tenant" not in errors:
        value = getattr(entry, key)
        # tenant_id=None is the platform catalog (IS NULL); django-stubs rejects None in a lookup.
        clashes = type(entry).objects.filter(**{key: value}, tenant_id=entry.tenant_id).exclude(pk=entry.pk)  # type: ignore[misc]
        if clashes.exists():
            where = "the platform catalog" if entry.tenant_id is None else f"tenant {entry.tenant}"
            errors[key] = [f"{value!r} is already taken in {where}."]
    if errors:
        raise ValidationError(errors)


@transaction.atomic
def catalog_entry_create(*, model: type[CatalogEntryModel], tenant: Tenant | None, fields: dict[str, Any]) -> Any:
    """A new resource, template or prompt, private to ``tenant`` or (None) in the platform catalog."""
    entry = model(tenant=tenant, **fields)
    catalog_entry_check(entry)
    entry.save()
    return entry


@transaction.atomic
def catalog_entry_update(*, entry: CatalogEntryModel, changes: dict[str, Any]) -> Any:
    for name, value in changes.items():
        setattr(entry, name, value)
    catalog_entry_check(entry)
    entry.save()
    return entry


@transaction.atomic
def catalog_entry_delete(*, entry: CatalogEntryModel) -> None:
    entry.delete()


@transaction.atomic
def catalog_touch(*, model: type[Tool] | type[Prompt], name: str, tenant: Tenant | None = None) -> None:
    """Save a tool or prompt unchanged: its version moves on, so every client that sees it
    is told its list changed (the conformance suite's list-change probes do this)."""
    model.objects.get(name=name, tenant=tenant).save()
