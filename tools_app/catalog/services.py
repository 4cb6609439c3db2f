"""Writes about the catalog: its entries (tools, resources, resource templates, prompts) and
access rules. The admin, the REST API, pack installs and imports all write entries through
the ``catalog_entry_*`` functions."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import transaction

from audit.services import audit_created_many
from tenants.models import ApiKey, Tenant
from tools_app.catalog.changes import catalog_changed
from tools_app.catalog.curation import CurationProblem, apply_curation
from tools_app.catalog.definitions import (
    EntryDefinition,
    PromptDefinition,
    ResourceDefinition,
    ResourceTemplateDefinition,
    ToolDefinition,
)
from tools_app.catalog.models import AccessRule, CatalogEntry, Prompt, Resource, ResourceTemplate, Tool, ToolCuration
from tools_app.catalog.schemas import SchemaProblem, check_object_schema
from tools_app.catalog.selectors import platform_rules_targeting


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


E = TypeVar("E", bound=CatalogEntry)

# The model each kind of pack definition installs as.
DEFINED_AS: dict[type[EntryDefinition], type[CatalogEntry]] = {
    ToolDefinition: Tool,
    ResourceDefinition: Resource,
    ResourceTemplateDefinition: ResourceTemplate,
    PromptDefinition: Prompt,
}


def catalog_key_clash(entry: CatalogEntry) -> str:
    """Why the entry's name (a resource's URI) is taken in its catalog, or "" when it is free.

    The unique constraints say the same, but their generic message names the constraint;
    this one says which catalog the name clashes in.
    """
    key = entry.catalog_key
    value = getattr(entry, key)
    # tenant_id=None is the platform catalog (IS NULL); django-stubs rejects None in a lookup.
    rows = type(entry)._default_manager.filter(**{key: value}, tenant_id=entry.tenant_id)  # type: ignore[misc]
    taken = rows.exclude(pk=entry.pk).exists()
    if not taken and isinstance(entry, Tool):
        # Another tool of the catalog may publish this name through its curation.
        curated = ToolCuration.objects.filter(name=value, tool__tenant_id=entry.tenant_id)  # type: ignore[misc]
        taken = curated.exclude(tool_id=entry.pk).exists()
    if not taken:
        return ""
    where = "the platform catalog" if entry.tenant_id is None else f"tenant {entry.tenant}"
    named = "at" if key == "uri" else "named"
    return f"A {entry._meta.verbose_name} {named} {value!r} already exists in {where}."


def catalog_entry_check(entry: CatalogEntry) -> None:
    """Raise ValidationError (messages per field) unless the tool, resource, template or prompt
    could be saved as it is: field types and ranges, the kind's own checks (schemas, backend
    settings, messages), and a name (URI) free in its catalog. Saves nothing, so it doubles as
    the API's dry run."""
    # ValidationErrors from full_clean, then messages of our own: ValidationError takes both.
    errors: dict[str, list[Any]] = {}
    try:
        entry.full_clean(validate_constraints=False)  # the clash message below is clearer
    except ValidationError as exc:
        errors = exc.update_error_dict(errors)
    if entry.catalog_key not in errors and "tenant" not in errors:
        clash = catalog_key_clash(entry)
        if clash:
            errors[entry.catalog_key] = [clash]
    if errors:
        raise ValidationError(errors)


@transaction.atomic
def catalog_entry_save(*, entry: E) -> E:
    """Check and save an entry edited in place (the admin's forms edit the instance); its version
    moves on with the save."""
    catalog_entry_check(entry)
    entry.save()
    return entry


def catalog_entry_create(*, model: type[E], tenant: Tenant | None, fields: dict[str, Any]) -> E:
    """A new entry, private to ``tenant`` or (None) in the platform catalog."""
    return catalog_entry_save(entry=model(tenant=tenant, **fields))


@dataclass
class BatchCreated(Generic[E]):
    """What ``catalog_entries_create`` did: the entries it made, and for each refused one its
    index in the input and the catalog's ValidationError (messages per field)."""

    created: list[E]
    refused: list[tuple[int, ValidationError]]


@transaction.atomic
def catalog_entries_create(*, model: type[E], tenant: Tenant | None, rows: list[dict[str, Any]]) -> BatchCreated[E]:
    """Many new entries in one catalog, each checked as ``catalog_entry_create`` checks it, with
    the same audit rows and one change publish; for imports of hundreds of entries.

    What ``catalog_entry_create`` does per entry in seven queries (a savepoint and its release,
    the tenant's existence, the name's, the INSERT, the audit row's tenant and INSERT) is done
    here once for all: the catalog's names are read once (and names repeated within ``rows``
    refused like taken ones), the entries and their audit rows are written with ``bulk_create``
    (which sends no signals, so the audit and the change publish are called directly). Measured
    on GitHub's description (1,223 tools): 6.2 s one by one, see README "OpenAPI import".
    A refused entry writes nothing; the others are still created. Only for kinds whose rows are
    complete without ``save()`` (a resource's ``save`` computes its size, so it is refused).
    """
    if model.save is not CatalogEntry.save:
        raise TypeError(f"{model.__name__} computes fields in save(); create its entries one by one")
    key = model.catalog_key
    taken = set(
        model._default_manager.filter(tenant_id=tenant.pk if tenant is not None else None).values_list(key, flat=True)
    )
    where = "the platform catalog" if tenant is None else f"tenant {tenant}"
    named = "at" if key == "uri" else "named"
    fresh: list[E] = []
    refused: list[tuple[int, ValidationError]] = []
    for index, fields in enumerate(rows):
        entry = model(tenant=tenant, **fields)
        errors: dict[str, list[Any]] = {}
        try:
            # The tenant was given as an instance, so its row exists: skip the per-entry lookup.
            entry.full_clean(exclude=["tenant"], validate_constraints=False)
        except ValidationError as exc:
            errors = exc.update_error_dict(errors)
        value = getattr(entry, key)
        if key not in errors and value in taken:
            errors[key] = [f"A {model._meta.verbose_name} {named} {value!r} already exists in {where}."]
        if errors:
            refused.append((index, ValidationError(errors)))
            continue
        taken.add(value)
        fresh.append(entry)
    created = model._default_manager.bulk_create(fresh, batch_size=500)
    if created:
        audit_created_many(list(created), tenant=tenant)
        catalog_changed(tenant.pk if tenant is not None else None)
    return BatchCreated(created, refused)


def catalog_entry_update(*, entry: E, changes: dict[str, Any]) -> E:
    """Apply ``changes`` to an entry's fields (its catalog is fixed)."""
    for name, value in changes.items():
        setattr(entry, name, value)
    return catalog_entry_save(entry=entry)


@transaction.atomic
def catalog_entry_delete(*, entry: CatalogEntry) -> None:
    entry.delete()


@transaction.atomic
def catalog_entry_install(
    *, definition: EntryDefinition, tags: list[str], tenant: Tenant | None = None
) -> CatalogEntry:
    """Create or update the entry a pack defines (idempotent: an unchanged entry keeps its version)."""
    model = DEFINED_AS[type(definition)]
    fields = {**definition.row_fields(), "tags": tags}
    key = model.catalog_key
    entry = model._default_manager.filter(tenant=tenant, **{key: fields[key]}).first()
    if entry is None:
        return catalog_entry_create(model=model, tenant=tenant, fields=fields)
    changed = {name: value for name, value in fields.items() if getattr(entry, name) != value}
    return catalog_entry_update(entry=entry, changes=changed) if changed else entry


CURATION_FIELDS = ("name", "title", "description", "arguments")


def tool_curation_check(curation: ToolCuration) -> None:
    """Raise ValidationError (per field) unless ``curation`` fits its tool: a valid name free in
    the tool's catalog (among names and other curations' names), argument rules that only hide,
    preset, narrow or re-word what the tool's source inputSchema has (a wider rule is refused),
    and a published inputSchema that is still a valid schema."""
    errors: dict[str, list[Any]] = {}
    try:
        curation.full_clean(exclude=["tool"], validate_constraints=False)
    except ValidationError as exc:
        errors = exc.update_error_dict(errors)
    tool = curation.tool
    if curation.name and "name" not in errors and curation.name != tool.name:
        probe = Tool(tenant_id=tool.tenant_id, name=curation.name)
        probe.pk = tool.pk  # its own curation and row do not count
        clash = catalog_key_clash(probe)
        if clash:
            errors["name"] = [clash]
    if "arguments" not in errors:
        try:
            applied = apply_curation(tool.input_schema, curation.arguments, strict=True)
            check_object_schema(applied.input_schema, label="the curated inputSchema")
        except (CurationProblem, SchemaProblem) as exc:
            errors["arguments"] = [str(exc)]
    if errors:
        raise ValidationError(errors)


@transaction.atomic
def tool_curate(*, tool: Tool, fields: dict[str, Any]) -> ToolCuration | None:
    """Set what the model sees of ``tool`` (``fields``: name, title, description, arguments;
    empty or missing ones fall back to the tool's source). A curation left with nothing in it
    is deleted (None). Audited and announced like any catalog change (signals)."""
    unknown = set(fields) - set(CURATION_FIELDS)
    if unknown:
        raise ValidationError(f"Unknown curation fields: {', '.join(sorted(unknown))}.")
    curation = ToolCuration.objects.select_for_update().filter(tool=tool).first() or ToolCuration(tool=tool)
    for name in CURATION_FIELDS:
        empty: Any = {} if name == "arguments" else ""
        setattr(curation, name, fields.get(name) or empty)
    if curation.is_empty():
        if curation.pk is not None:
            curation.delete()
        return None
    tool_curation_check(curation)
    curation.save()
    return curation


@transaction.atomic
def tool_curation_delete(*, tool: Tool) -> None:
    """Publish the tool's source definition again."""
    for curation in ToolCuration.objects.filter(tool=tool):
        curation.delete()
