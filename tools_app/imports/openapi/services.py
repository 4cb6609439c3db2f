"""Previewing and applying an OpenAPI import. Every tool is written through the catalog's
``catalog_entry_*`` services, so it gets the same checks, versions, audit and list_changed
as a tool made by hand.

An admin running an import approves what it creates. A re-import that changes a tool's
definition (title, description, schemas, annotations, or how it calls the API) parks the new
one for approval (``tools_app.catalog.pinning``) unless the import is run with ``approve`` or
the source is marked ``auto_approve``; its other changes (tags) apply at once.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from tenants.models import Tenant
from tools_app.catalog.models import AccessRule, PendingDefinition, Tool
from tools_app.catalog.pinning import definition_offer, tools_with_pending
from tools_app.catalog.services import access_rule_grant_pattern, catalog_entries_create, catalog_entry_update
from tools_app.imports.openapi.document import (
    DocumentProblem,
    check_structure,
    fetch_document,
    mapping,
    parse_text,
    place_of,
    version_of,
)
from tools_app.imports.openapi.models import OpenApiOperation, OpenApiSource
from tools_app.imports.openapi.operations import (
    OperationReader,
    Selection,
    SkippedOperation,
    ToolDraft,
    server_url,
)
from tools_app.imports.openapi.security import OptionProblem, SecurityMap, SecurityOptions, Where

__all__ = [
    "DocumentProblem",
    "ImportOptions",
    "ImportPlan",
    "OptionProblem",
    "SecurityOptions",
    "openapi_import",
    "openapi_preview",
    "read_source",
]

# Fields a re-import compares and updates; the admin's own settings (timeout, execution mode,
# confirmation, enabled) are left as they are.
DEFINED_FIELDS = (
    "title",
    "description",
    "input_schema",
    "output_schema",
    "read_only_hint",
    "destructive_hint",
    "idempotent_hint",
    "open_world_hint",
    "backend_kind",
    "backend_config",
    "tags",
)
# Of those, what only an approval changes: what the model reads, and where and how calls go
# (a changed server URL would send the vault's credential to another host).
PINNED_FIELDS = tuple(name for name in DEFINED_FIELDS if name != "tags")


@dataclass
class ImportOptions:
    prefix: str = ""
    base_url: str = ""
    selection: Selection = field(default_factory=Selection)
    tags: Sequence[str] = ()  # extra Toolbay tags on every tool
    name: str = ""  # the source's name; default: the prefix, else the document's title
    # Publish changed definitions of tools an earlier import made (else they wait for approval).
    approve: bool = False
    # OAuth: the connection provider of schemes a user consents to (else matched by endpoints),
    # and the client ID of client-credentials schemes.
    security: SecurityOptions = field(default_factory=SecurityOptions)


@dataclass
class PlannedTool:
    # park: the definition changed and waits for approval (its other changes, if any, apply).
    action: Literal["create", "update", "park", "unchanged"]
    draft: ToolDraft
    changes: list[str] = field(default_factory=list)  # changed field names (updates)


@dataclass
class ImportPlan:
    """What an import will do (a preview) or did."""

    source_name: str
    title: str
    version: str
    sha256: str
    base_url: str
    document_changed: bool
    tools: list[PlannedTool]
    skipped: list[SkippedOperation]
    notes: list[str]
    # Tools an earlier import of this source made whose operation the document no longer has
    # (or the selection leaves out); they are kept.
    missing: list[str]

    def count(self, action: str) -> int:
        return sum(1 for planned in self.tools if planned.action == action)


@dataclass
class SourceText:
    text: bytes
    location: str


def read_source(*, text: str | bytes | None = None, url: str = "", path: str = "") -> SourceText:
    """The document's bytes from pasted text, a URL (SSRF-guarded) or a file."""
    if url:
        return SourceText(fetch_document(url), url)
    if path:
        try:
            with open(path, "rb") as handle:
                return SourceText(handle.read(), path)
        except OSError as exc:
            raise DocumentProblem("", f"cannot read {path}: {exc.strerror}") from None
    if text is None or not text:
        raise DocumentProblem("", "give the document as text, a URL or a file")
    return SourceText(text.encode() if isinstance(text, str) else text, "")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-._").lower()[:60] or "api"


def _source_name(document: dict[str, Any], options: ImportOptions) -> str:
    if options.name:
        return _slug(options.name)
    if options.prefix:
        return _slug(options.prefix)
    info = mapping(document.get("info"))
    return _slug(str(info.get("title") or "api"))


def openapi_preview(*, source: SourceText, tenant: Tenant | None, options: ImportOptions) -> ImportPlan:
    """What importing ``source`` would create, update and skip, and why; saves nothing.

    Raises DocumentProblem (naming the place) when the document cannot be used at all, and
    OptionProblem when an option names what does not exist (a connection provider).
    """
    document = parse_text(source.text)
    version = version_of(document)
    structure = check_structure(document, version)
    tenant_id = tenant.pk if tenant is not None else None
    name = _source_name(document, options)
    base_url = options.base_url or server_url(document, version, source.location)
    if not base_url.startswith(("http://", "https://")):
        place = "host" if version == "2.0" else "servers"
        raise DocumentProblem(place, "no absolute server URL; give a base URL")
    where = Where(name, tenant_id, tenant.slug if tenant is not None else "", base_url)
    security = SecurityMap(document, version, where=where, options=options.security)
    notes = [*structure.notes, *security.notes]
    reader = OperationReader(
        document, version, base_url=base_url, prefix=options.prefix, auth=security, structure=structure
    )
    operations = reader.operations(options.selection)
    wanted = set(options.selection.operation_ids)
    if wanted:
        present = {operation.get("operationId") for _, _, operation, _ in operations}
        absent = sorted(wanted - present)
        if absent:
            raise DocumentProblem("paths", f"no operation has operationId {absent[0]!r}")
    if not operations:
        raise DocumentProblem("paths", "no operation matches the selection")

    existing = OpenApiSource.objects.filter(tenant=tenant, name=name).first()
    linked: dict[str, OpenApiOperation] = {}
    if existing is not None:
        linked = {link.operation: link for link in existing.operations.select_related("tool")}
    # Names of tools this source does not own are taken; its own tools keep their names.
    own_ids = {link.tool_id for link in linked.values()}
    taken = {
        tool_name.lower()
        for tool_id, tool_name in Tool.objects.filter(tenant=tenant).values_list("id", "name")
        if tool_id not in own_ids
    }
    taken |= {owned.tool.name.lower() for owned in linked.values()}

    tags = [f"openapi:{name}", *options.tags]
    planned: list[PlannedTool] = []
    skipped: list[SkippedOperation] = []
    for method, path, operation, _place in operations:
        label = f"{method.upper()} {path}"
        link = linked.get(label)
        try:
            draft = reader.draft(method, path, operation, taken if link is None else set())
        except DocumentProblem as exc:
            skipped.append(SkippedOperation(label, str(exc)))
            continue
        except RecursionError:  # schemas nested beyond Python's stack (a document built to do that)
            place = place_of(("paths", path, method))
            skipped.append(SkippedOperation(label, f"{place}: its schemas nest too deeply"))
            continue
        draft.fields["tags"] = list(dict.fromkeys(tags))
        if link is None:
            planned.append(PlannedTool("create", draft))
            continue
        draft.fields["name"] = link.tool.name  # a tool keeps its name across re-imports
        changes = [key for key in DEFINED_FIELDS if getattr(link.tool, key) != draft.fields.get(key)]
        action: Literal["update", "park", "unchanged"] = "update" if changes else "unchanged"
        if set(changes) & set(PINNED_FIELDS) and not (options.approve or existing is None or existing.auto_approve):
            action = "park"
        planned.append(PlannedTool(action, draft, changes))
    seen = {planned_tool.draft.operation for planned_tool in planned} | {item.operation for item in skipped}
    info = mapping(document.get("info"))
    sha256 = hashlib.sha256(source.text).hexdigest()
    return ImportPlan(
        source_name=name,
        title=str(info.get("title") or "")[:200],
        version=version,
        sha256=sha256,
        base_url=base_url,
        document_changed=existing is None or existing.sha256 != sha256,
        tools=planned,
        skipped=skipped,
        notes=notes,
        missing=sorted(link.tool.name for label, link in linked.items() if label not in seen),
    )


@transaction.atomic
def openapi_import(
    *,
    source: SourceText,
    tenant: Tenant | None,
    options: ImportOptions,
    grant: bool = False,
) -> ImportPlan:
    """Preview, then create and update the tools and keep the document; one transaction.

    A tool the catalog refuses (its checks are the last word) is moved to ``skipped`` with
    the catalog's message. ``grant`` adds an allow rule for ``tenant`` on the tag of this
    source's tools.
    """
    plan = openapi_preview(source=source, tenant=tenant, options=options)
    now = timezone.now()
    record, _ = OpenApiSource.objects.update_or_create(
        tenant=tenant,
        name=plan.source_name,
        defaults={
            "title": plan.title,
            "location": source.location[:2048],
            "document": source.text.decode("utf-8-sig", errors="replace"),
            "sha256": plan.sha256,
            "options": {
                "prefix": options.prefix,
                "base_url": options.base_url,
                "operation_ids": list(options.selection.operation_ids),
                "openapi_tags": list(options.selection.tags),
                "paths": list(options.selection.paths),
                "tags": list(options.tags),
                "connection_provider": options.security.connection_provider,
                "client_id": options.security.client_id,
            },
            "imported_at": now,
        },
    )
    links = {link.operation: link for link in record.operations.select_related("tool")}
    proposing = tools_with_pending([link.tool_id for link in links.values()])
    # New tools in one batch (checked, audited and published as one by one, in a few queries).
    creates = [planned for planned in plan.tools if planned.action == "create"]
    batch = catalog_entries_create(model=Tool, tenant=tenant, rows=[planned.draft.fields for planned in creates])
    refused = dict(batch.refused)
    made = iter(batch.created)
    dropped: set[int] = set()  # id() of the planned tools the catalog refused
    new_links: list[OpenApiOperation] = []
    for index, planned in enumerate(creates):
        if index in refused:
            plan.skipped.append(_refusal(planned.draft, refused[index]))
            dropped.add(id(planned))
            continue
        new_links.append(_link(record, next(made), planned.draft))
    for planned in plan.tools:
        draft = planned.draft
        # No savepoint of our own: the catalog refuses (ValidationError) before it writes anything
        # (but a re-import's tag change, written before a refused definition, stays).
        try:
            if planned.action in ("update", "park"):
                link = links[draft.operation]
                _apply(record, link.tool, planned, plan)
                link.definition_sha256 = _definition_hash(draft)
                link.source_definition = draft.source
                link.operation_id = draft.operation_id[:500]
                link.save(update_fields=["definition_sha256", "source_definition", "operation_id"])
            elif draft.operation in links and links[draft.operation].tool_id in proposing:
                # The document is back to the pinned definition: its proposal is withdrawn.
                _offer(record, links[draft.operation].tool, draft, PINNED_FIELDS, approve=False)
        except ValidationError as exc:
            plan.skipped.append(_refusal(draft, exc))
            dropped.add(id(planned))
    OpenApiOperation.objects.bulk_create(new_links)
    plan.tools = [planned for planned in plan.tools if id(planned) not in dropped]
    if grant and tenant is not None:
        access_rule_grant_pattern(
            tenant=tenant,
            pattern=f"tag:openapi:{plan.source_name}",
            note=f"OpenAPI import {plan.source_name}",
            kind=AccessRule.Kind.TOOL,
        )
    return plan


def _offer(record: OpenApiSource, tool: Tool, draft: ToolDraft, names: Sequence[str], *, approve: bool) -> str:
    return definition_offer(
        tool=tool,
        fields={name: draft.fields.get(name) for name in names},
        source_kind=PendingDefinition.SourceKind.OPENAPI,
        source_id=record.pk,
        source_name=record.name,
        approve=approve,
    )


def _apply(record: OpenApiSource, tool: Tool, planned: PlannedTool, plan: ImportPlan) -> None:
    """A re-import's changes to one tool: tags at once, the definition applied or parked."""
    loose = {key: planned.draft.fields[key] for key in planned.changes if key not in PINNED_FIELDS}
    pinned = [key for key in planned.changes if key in PINNED_FIELDS]
    if loose:  # first: the offer below reads the tool again, this write included
        catalog_entry_update(entry=tool, changes=loose)
    if not pinned:
        return
    offered = _offer(record, tool, planned.draft, pinned, approve=planned.action == "update")
    if offered == "rejected":
        plan.notes.append(f"{planned.draft.name}: an admin rejected this definition; the tool keeps the pinned one")
        planned.changes = list(loose)
        planned.action = "update" if loose else "unchanged"


def _refusal(draft: ToolDraft, exc: ValidationError) -> SkippedOperation:
    messages = "; ".join(f"{key}: {' '.join(value)}" for key, value in exc.message_dict.items())
    place = place_of(("paths", draft.source["path"], draft.source["method"]))
    return SkippedOperation(draft.operation, f"{place}: refused by the catalog: {messages}")


def _definition_hash(draft: ToolDraft) -> str:
    definition = {key: draft.fields.get(key) for key in ("name", *DEFINED_FIELDS)}
    return hashlib.sha256(json.dumps(definition, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def _link(record: OpenApiSource, tool: Tool, draft: ToolDraft) -> OpenApiOperation:
    return OpenApiOperation(
        source=record,
        tool=tool,
        operation=draft.operation[:1000],
        operation_id=draft.operation_id[:500],
        definition_sha256=_definition_hash(draft),
        source_definition=draft.source,
    )
