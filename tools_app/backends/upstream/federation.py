"""Upstream MCP servers: reads, and the writes that import their tools.

An imported tool is an ordinary ``Tool`` (backend ``upstream_mcp``, settings
``{"upstream": <id>, "tool": "<upstream name>"}``) so access rules, the catalog cache and
list-changed publishing treat it like any other. What comes from the upstream (title,
description, schemas, annotations, icons) is overwritten by every refresh; what the
admin decides (the local name, enabled, tags, execution mode, timeout) is kept.

What the upstream offers is pinned (``tools_app.catalog.pinning``): a refresh that finds a
published tool's title, description, schemas, annotations or icons changed parks the new
definition for an admin's approval, and clients keep the approved one, unless the server is
marked ``auto_approve``. Tools the upstream adds follow ``publish_new_tools`` as before.

A refresh that finds a published tool gone disables it (and marks it ``withdrawn`` in
its settings) instead of deleting it, so access rules that name it survive; the tool
comes back when the upstream offers it again.

With ``import_resources_and_prompts`` a refresh also mirrors the upstream's resources,
resource templates and prompts (when it declares those capabilities): every one becomes a
row with backend ``upstream_mcp`` (``{"upstream": <id>, "uri" | "uri_template" | "prompt":
…}``), named with the tool prefix (URIs are kept as they are), tagged with the server's
tags, and withdrawn (disabled) when the upstream drops it. There is no publish step: access
rules of their kind decide who sees them.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from tools_app.backends.cache import GenerationCache
from tools_app.backends.models import owned_by
from tools_app.backends.upstream.client import UpstreamEndpoint, UpstreamError, UpstreamSession, UpstreamUnavailable
from tools_app.backends.upstream.models import UpstreamServer
from tools_app.backends.vault import SecretUnavailable, unseal
from tools_app.catalog.models import TOOL_NAME_PATTERN, PendingDefinition, Prompt, Resource, ResourceTemplate, Tool
from tools_app.catalog.pinning import definition_offer, tools_with_pending
from tools_app.catalog.schemas import SchemaProblem, check_object_schema
from tools_app.catalog.services import catalog_entry_save
from tools_app.catalog.uri_templates import TemplateProblem, compile_template
from tools_app.catalog.validation import check_icons

log = logging.getLogger(__name__)

BACKEND_KIND = "upstream_mcp"
ANNOTATION_FIELDS = {
    "readOnlyHint": "read_only_hint",
    "destructiveHint": "destructive_hint",
    "idempotentHint": "idempotent_hint",
    "openWorldHint": "open_world_hint",
}
# What is kept of an upstream's tools/list entry (the admin publishes from it).
DISCOVERED_KEYS = ("name", "title", "description", "inputSchema", "outputSchema", "annotations", "icons")


class UpstreamRefreshError(Exception):
    """The upstream's tools could not be fetched; the message is safe to show an admin."""


# --- reads -----------------------------------------------------------------------------------


def upstreams_of(tenant_id: int | None) -> QuerySet[UpstreamServer]:
    return UpstreamServer.objects.filter(owned_by(tenant_id))


def published_tools(upstream: UpstreamServer) -> QuerySet[Tool]:
    return Tool.objects.filter(
        owned_by(upstream.tenant_id), backend_kind=BACKEND_KIND, backend_config__upstream=upstream.pk
    )


def endpoint_of(upstream: UpstreamServer) -> UpstreamEndpoint:
    """Connection settings with the decrypted credential (the service credential, which lists
    the upstream's tools; a server with a ``user_credential`` sends each caller's own token on
    calls instead); raises SecretUnavailable.

    For a packaged server this is only its identity (``packaged``, no URL): where its
    instance answers is found per call (``locate_instance``)."""
    if upstream.packaged:
        return UpstreamEndpoint(
            id=upstream.pk,
            name=upstream.name,
            url="",
            headers=(),
            secret_values=(),
            timeout_seconds=settings.TOOLBAY_UPSTREAM_TIMEOUT_SECONDS,
            packaged=True,
            per_user=upstream.per_user,
        )
    headers: list[tuple[str, str]] = []
    secret_values: tuple[str, ...] = ()
    if upstream.auth != UpstreamServer.Auth.NONE:
        if upstream.secret is None:
            raise SecretUnavailable(f"upstream {upstream.name!r} has no secret configured")
        value = unseal(upstream.secret.ciphertext, name=upstream.secret.name)
        secret_values = (value,)
        if upstream.auth == UpstreamServer.Auth.BEARER:
            headers.append(("Authorization", f"Bearer {value}"))
        else:
            headers.append((upstream.auth_header, value))
    return UpstreamEndpoint(
        id=upstream.pk,
        name=upstream.name,
        url=upstream.url,
        headers=tuple(headers),
        secret_values=secret_values,
        timeout_seconds=settings.TOOLBAY_UPSTREAM_TIMEOUT_SECONDS,
        user_credential=upstream.user_credential_spec,
    )


def _load_endpoint(key: tuple[int, int | None]) -> UpstreamEndpoint | None:
    upstream_id, tenant_id = key
    upstream = upstreams_of(tenant_id).filter(pk=upstream_id, enabled=True).select_related("secret").first()
    return endpoint_of(upstream) if upstream is not None else None


_endpoints: GenerationCache[tuple[int, int | None], UpstreamEndpoint] = GenerationCache(_load_endpoint)


class InstanceLocator(Protocol):
    async def __call__(self, endpoint: UpstreamEndpoint, *, tenant_id: int, user: str | None) -> UpstreamEndpoint: ...


_locator: InstanceLocator | None = None
_forget: Callable[[UpstreamEndpoint], None] | None = None


def register_instance_locator(locator: InstanceLocator, forget: Callable[[UpstreamEndpoint], None]) -> None:
    """Packaged servers (``tools_app.backends.packaged``, which builds on this package) say here
    how their instances are found (and how a located one is forgotten when it is gone);
    federation knows them only as endpoints without a URL."""
    global _locator, _forget
    _locator, _forget = locator, forget


def forget_instance(endpoint: UpstreamEndpoint) -> None:
    if _forget is not None:
        _forget(endpoint)


async def locate_instance(endpoint: UpstreamEndpoint, *, tenant_id: int, user: str | None) -> UpstreamEndpoint:
    """Where the instance of a packaged server for this tenant (and user, for per-user
    servers) answers, started if needed; raises UpstreamUnavailable."""
    if _locator is None:
        raise UpstreamUnavailable("packaged servers are not available in this process")
    return await _locator(endpoint, tenant_id=tenant_id, user=user if endpoint.per_user else None)


async def endpoint_for_tool(
    upstream_id: int, tenant_id: int | None, *, caller_tenant_id: int | None = None, user: str | None = None
) -> UpstreamEndpoint | None:
    """The enabled upstream of that tenant (cached); None when missing, foreign or disabled.

    A packaged server's endpoint is its instance for the calling tenant (``caller_tenant_id``,
    else the owner; a platform server gets one instance per calling tenant); raises
    UpstreamUnavailable when that cannot be had now."""
    endpoint = await _endpoints.get((upstream_id, tenant_id))
    if endpoint is None or not endpoint.packaged:
        return endpoint
    scope_tenant = caller_tenant_id if caller_tenant_id is not None else (tenant_id or 0)
    return await locate_instance(endpoint, tenant_id=scope_tenant, user=user)


def clear_cache() -> None:
    _endpoints.clear()


# --- fetching ----------------------------------------------------------------------------------


@dataclass
class Discovery:
    tools: list[dict[str, Any]]
    server_info: dict[str, Any]
    # Fetched only when the server imports them (``mirrored``); else left alone by a refresh.
    resources: list[dict[str, Any]] = field(default_factory=list)
    templates: list[dict[str, Any]] = field(default_factory=list)
    prompts: list[dict[str, Any]] = field(default_factory=list)
    mirrored: bool = False


async def discover(
    endpoint: UpstreamEndpoint, session: UpstreamSession | None = None, *, with_resources_and_prompts: bool = False
) -> Discovery:
    """The upstream's tools (and resources, templates and prompts when asked), over
    ``session`` or a session of its own (closed after); raises UpstreamRefreshError."""
    own = session is None
    session = session or UpstreamSession(endpoint)
    try:
        discovery = Discovery(tools=await session.list_tools(), server_info={})
        discovery.server_info = {**session.server_info, "protocolVersion": session.protocol_version}
        if with_resources_and_prompts:
            discovery.mirrored = True
            if "resources" in session.capabilities:
                discovery.resources = await session.list_all("resources/list", "resources")
                discovery.templates = await session.list_all("resources/templates/list", "resourceTemplates")
            if "prompts" in session.capabilities:
                discovery.prompts = await session.list_all("prompts/list", "prompts")
    except (UpstreamUnavailable, UpstreamError) as exc:
        raise UpstreamRefreshError(f"cannot list what upstream {endpoint.name!r} offers: {exc}") from None
    finally:
        if own:
            await session.close()
    return discovery


# --- turning upstream tool definitions into tool fields ------------------------------------------


def local_name(prefix: str, upstream_name: str) -> str:
    """A valid Toolbay tool name for an upstream tool (invalid characters become "_")."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"{prefix}{upstream_name}")[:128]


def _definition(raw: dict[str, Any], upstream: UpstreamServer) -> tuple[dict[str, Any] | None, str | None]:
    """(the tool fields, or None if unusable; a note for the admin)."""
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        return None, "skipped a tool without a name"
    try:
        check_object_schema(raw.get("inputSchema"), label="inputSchema")
    except SchemaProblem as exc:
        return None, f"skipped {name!r}: {exc}"
    note = None
    output_schema = raw.get("outputSchema")
    if output_schema is not None:
        try:
            check_object_schema(output_schema, label="outputSchema")
        except SchemaProblem as exc:
            output_schema, note = None, f"{name!r}: its outputSchema was dropped ({exc})"
    annotations: dict[str, Any] = raw["annotations"] if isinstance(raw.get("annotations"), dict) else {}
    title = raw.get("title") or annotations.get("title") or ""
    description: str = raw["description"] if isinstance(raw.get("description"), str) else ""
    icons = []
    for icon in raw.get("icons") or []:
        try:
            check_icons([icon])
        except ValidationError:
            continue
        icons.append(icon)
    fields: dict[str, Any] = {
        "title": str(title)[:200],
        "description": description.strip() or f"The tool {name} of the MCP server {upstream.name}.",
        "input_schema": raw["inputSchema"],
        "output_schema": output_schema,
        "icons": icons,
    }
    for key, field_name in ANNOTATION_FIELDS.items():
        value = annotations.get(key)
        fields[field_name] = value if isinstance(value, bool) else None
    return {"name": name, "fields": fields}, note


@dataclass
class RefreshReport:
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    withdrawn: list[str] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)
    unpublished: list[str] = field(default_factory=list)  # offered upstream, not published here
    parked: list[str] = field(default_factory=list)  # changed definitions waiting for approval
    notes: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.added or self.updated or self.withdrawn or self.restored or self.parked)

    def summary(self) -> str:
        parts = [
            f"{label} {', '.join(names)}"
            for label, names in (
                ("added", self.added),
                ("updated", self.updated),
                ("withdrawn", self.withdrawn),
                ("restored", self.restored),
                ("waiting for approval", self.parked),
                ("not published", self.unpublished),
            )
            if names
        ]
        return "; ".join(parts) or "no changes"


def _new_tool(upstream: UpstreamServer, upstream_name: str, name: str, fields: dict[str, Any]) -> Tool:
    tool = Tool(
        tenant_id=upstream.tenant_id,
        name=name,
        tags=list(upstream.tags or []),
        backend_kind=BACKEND_KIND,
        backend_config={"upstream": upstream.pk, "tool": upstream_name},
        timeout_seconds=upstream.timeout_seconds,
        **fields,
    )
    return catalog_entry_save(entry=tool)


def _name_taken(upstream: UpstreamServer, name: str, exclude: int | None = None) -> bool:
    tools = Tool.objects.filter(owned_by(upstream.tenant_id), name=name)
    return (tools.exclude(pk=exclude) if exclude is not None else tools).exists()


# --- mirroring resources, resource templates and prompts -------------------------------------------


def _text(raw: dict[str, Any], key: str, limit: int | None = None) -> str:
    value = raw.get(key)
    return (value if isinstance(value, str) else "")[:limit]


def _presentation(raw: dict[str, Any]) -> dict[str, Any]:
    annotations: dict[str, Any] = raw["annotations"] if isinstance(raw.get("annotations"), dict) else {}
    audience = annotations.get("audience")
    priority = annotations.get("priority")
    icons = []
    for icon in raw.get("icons") or []:
        try:
            check_icons([icon])
        except ValidationError:
            continue
        icons.append(icon)
    return {
        "title": _text(raw, "title", 200),
        "description": _text(raw, "description"),
        "icons": icons,
        "audience": [a for a in audience if a in ("user", "assistant")] if isinstance(audience, list) else [],
        "priority": float(priority) if isinstance(priority, int | float) and 0 <= priority <= 1 else None,
    }


def _resource_fields(raw: dict[str, Any], upstream: UpstreamServer) -> dict[str, Any] | None:
    if not isinstance(raw.get("uri"), str) or not isinstance(raw.get("name"), str):
        return None
    return {
        "uri": raw["uri"][:2048],
        "name": local_name(upstream.tool_prefix, raw["name"]),
        "mime_type": _text(raw, "mimeType", 200),
        **_presentation(raw),
    }


def _template_fields(raw: dict[str, Any], upstream: UpstreamServer) -> dict[str, Any] | None:
    if not isinstance(raw.get("uriTemplate"), str) or not isinstance(raw.get("name"), str):
        return None
    try:
        compile_template(raw["uriTemplate"])
    except TemplateProblem:
        return None
    return {
        "uri_template": raw["uriTemplate"],
        "name": local_name(upstream.tool_prefix, raw["name"]),
        "mime_type": _text(raw, "mimeType", 200),
        **_presentation(raw),
    }


def _prompt_fields(raw: dict[str, Any], upstream: UpstreamServer) -> dict[str, Any] | None:
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        return None
    arguments = []
    for argument in raw.get("arguments") or []:
        if isinstance(argument, dict) and isinstance(argument.get("name"), str) and argument["name"]:
            kept = {k: argument[k] for k in ("name", "title", "description") if isinstance(argument.get(k), str)}
            if argument.get("required") is True:
                kept["required"] = True
            arguments.append(kept)
    fields = _presentation(raw)
    del fields["audience"], fields["priority"]
    fields["description"] = fields["description"].strip() or f"The prompt {name} of the MCP server {upstream.name}."
    return {"name": local_name(upstream.tool_prefix, name), "arguments": arguments, **fields}


@dataclass(frozen=True)
class Mirror:
    """How one kind of upstream entry becomes rows: its model, the Discovery list it comes
    from, the backend setting that names it upstream and the key of that name in the list."""

    model: type[Resource] | type[ResourceTemplate] | type[Prompt]
    listing: str
    config_key: str
    upstream_key: str
    label: str
    fields_of: Any

    def apply(self, upstream: UpstreamServer, raws: list[dict[str, Any]], report: RefreshReport) -> None:
        rows = self.model.objects.filter(
            owned_by(upstream.tenant_id), backend_kind=BACKEND_KIND, backend_config__upstream=upstream.pk
        ).select_for_update()
        existing = {row.backend_config.get(self.config_key): row for row in rows}
        wanted: dict[str, dict[str, Any]] = {}
        for raw in raws:
            fields = self.fields_of(raw, upstream)
            if fields is None:
                report.notes.append(f"skipped a {self.label} that cannot be imported: {str(raw)[:200]}")
                continue
            wanted[raw[self.upstream_key]] = fields
        for key, row in existing.items():
            config = dict(row.backend_config)
            if key not in wanted:
                if not config.get("withdrawn"):
                    row.enabled, row.backend_config = False, {**config, "withdrawn": True}
                    row.save()
                    report.withdrawn.append(f"{self.label} {key}")
                continue
            fields = wanted[key]
            changed = [name for name, value in fields.items() if getattr(row, name) != value]
            restored = bool(config.pop("withdrawn", False))
            for name in changed:
                setattr(row, name, fields[name])
            if restored:
                row.enabled, row.backend_config = True, config
            if changed or restored:
                self._save(row, key, report, restored=restored)
        for key, fields in wanted.items():
            if key not in existing:
                row = self.model(
                    tenant_id=upstream.tenant_id,
                    tags=list(upstream.tags or []),
                    backend_kind=BACKEND_KIND,
                    backend_config={"upstream": upstream.pk, self.config_key: key},
                    timeout_seconds=upstream.timeout_seconds,
                    **fields,
                )
                self._save(row, key, report, new=True)

    def _save(self, row: Any, key: str, report: RefreshReport, *, new: bool = False, restored: bool = False) -> None:
        try:
            catalog_entry_save(entry=row)
        except ValidationError as exc:
            report.notes.append(f"{self.label} {key!r} was not imported: {'; '.join(exc.messages)}")
            return
        (report.added if new else report.restored if restored else report.updated).append(f"{self.label} {key}")


MIRRORS = (
    Mirror(Resource, "resources", "uri", "uri", "resource", _resource_fields),
    Mirror(ResourceTemplate, "templates", "uri_template", "uriTemplate", "resource template", _template_fields),
    Mirror(Prompt, "prompts", "prompt", "name", "prompt", _prompt_fields),
)


def mirrored_resources(upstream_id: int, upstream_uri: str) -> list[tuple[str, int | None]]:
    """(local URI, tenant id) of the resources imported from that upstream URI."""
    rows = Resource.objects.filter(
        backend_kind=BACKEND_KIND, backend_config__upstream=upstream_id, backend_config__uri=upstream_uri
    )
    return list(rows.values_list("uri", "tenant_id"))


def mirrored_uris(upstream_id: int) -> list[str]:
    """The upstream URIs of the enabled resources imported from it (the listener subscribes to them)."""
    rows = Resource.objects.filter(backend_kind=BACKEND_KIND, backend_config__upstream=upstream_id, enabled=True)
    return [row.backend_config["uri"] for row in rows.only("backend_config") if "uri" in row.backend_config]


# --- writes -------------------------------------------------------------------------------------


@transaction.atomic
def upstream_apply_discovery(*, upstream_id: int, discovery: Discovery) -> RefreshReport:
    """Bring the published tools in line with what the upstream offers now."""
    upstream = UpstreamServer.objects.select_for_update().get(pk=upstream_id)
    report = RefreshReport()
    definitions: dict[str, dict[str, Any]] = {}
    for raw in discovery.tools:
        definition, note = _definition(raw, upstream)
        if note:
            report.notes.append(note)
        if definition is not None:
            definitions[definition["name"]] = definition
    published = {tool.backend_config.get("tool"): tool for tool in published_tools(upstream).select_for_update()}
    proposing = tools_with_pending([tool.pk for tool in published.values()])
    for upstream_name, tool in published.items():
        definition = definitions.get(upstream_name)
        config = dict(tool.backend_config)
        if definition is None:
            if not config.get("withdrawn"):
                tool.enabled = False
                tool.backend_config = {**config, "withdrawn": True}
                tool.save()
                report.withdrawn.append(tool.name)
            continue
        if config.pop("withdrawn", False):
            tool.backend_config = config
            tool.enabled = True
            catalog_entry_save(entry=tool)
            report.restored.append(tool.name)
        changed = any(getattr(tool, name) != value for name, value in definition["fields"].items())
        if not changed and tool.pk not in proposing:
            continue
        try:
            offered = definition_offer(
                tool=tool,
                fields=definition["fields"],
                source_kind=PendingDefinition.SourceKind.UPSTREAM_MCP,
                source_id=upstream.pk,
                source_name=upstream.name,
                approve=upstream.auto_approve,
            )
        except ValidationError as exc:
            report.notes.append(f"{tool.name}: the upstream's new definition is refused: {'; '.join(exc.messages)}")
            continue
        if offered == "applied" and tool.name not in report.restored:
            report.updated.append(tool.name)
        elif offered == "parked":
            report.parked.append(tool.name)
    for upstream_name, definition in definitions.items():
        if upstream_name in published:
            continue
        name = local_name(upstream.tool_prefix, upstream_name)
        if not upstream.publish_new_tools:
            report.unpublished.append(upstream_name)
        elif _name_taken(upstream, name):
            report.notes.append(f"{upstream_name!r} was not published: a tool named {name!r} already exists")
            report.unpublished.append(upstream_name)
        else:
            try:
                _new_tool(upstream, upstream_name, name, definition["fields"])
            except ValidationError as exc:
                report.notes.append(f"{upstream_name!r} was not published: {'; '.join(exc.messages)}")
                report.unpublished.append(upstream_name)
                continue
            report.added.append(name)
    if discovery.mirrored:
        for mirror in MIRRORS:
            mirror.apply(upstream, getattr(discovery, mirror.listing), report)
    upstream.discovered_tools = [
        {key: raw[key] for key in DISCOVERED_KEYS if key in raw}
        for raw in discovery.tools
        if isinstance(raw.get("name"), str)
    ]
    upstream.server_info = discovery.server_info
    upstream.refreshed_at = timezone.now()
    upstream.last_error = "\n".join(report.notes)
    upstream.save(update_fields=["discovered_tools", "server_info", "refreshed_at", "last_error", "updated_at"])
    return report


async def _reachable(endpoint: UpstreamEndpoint, upstream: UpstreamServer) -> UpstreamEndpoint:
    """A packaged server is listed through its owner's instance; raises UpstreamRefreshError."""
    if not endpoint.packaged:
        return endpoint
    try:
        return await locate_instance(endpoint, tenant_id=upstream.tenant_id or 0, user=None)
    except UpstreamUnavailable as exc:
        raise UpstreamRefreshError(f"cannot start packaged server {upstream.name!r}: {exc}") from None


async def _discover_reachable(upstream: UpstreamServer) -> Discovery:
    endpoint = await _reachable(endpoint_of(upstream), upstream)
    return await discover(endpoint, with_resources_and_prompts=upstream.import_resources_and_prompts)


def _record_failure(upstream_id: int, message: str) -> None:
    UpstreamServer.objects.filter(pk=upstream_id).update(last_error=message, refreshed_at=timezone.now())


def upstream_refresh(*, upstream_id: int) -> RefreshReport:
    """Fetch the upstream's tools and apply them; raises UpstreamRefreshError (recorded)."""
    upstream = UpstreamServer.objects.select_related("secret").get(pk=upstream_id)
    try:
        discovery = async_to_sync(_discover_reachable)(upstream)
    except (SecretUnavailable, UpstreamRefreshError) as exc:
        _record_failure(upstream_id, str(exc))
        raise UpstreamRefreshError(str(exc)) from None
    report = upstream_apply_discovery(upstream_id=upstream_id, discovery=discovery)
    log.info("upstream %s refreshed: %s", upstream.name, report.summary())
    return report


async def upstream_refresh_async(*, upstream_id: int, session: UpstreamSession | None = None) -> RefreshReport:
    """The same for async callers (the listener, which passes its standing session)."""
    upstream = await UpstreamServer.objects.select_related("secret").aget(pk=upstream_id)
    try:
        endpoint = session.endpoint if session is not None else await _reachable(endpoint_of(upstream), upstream)
        discovery = await discover(endpoint, session, with_resources_and_prompts=upstream.import_resources_and_prompts)
    except (SecretUnavailable, UpstreamRefreshError) as exc:
        await sync_to_async(_record_failure)(upstream_id, str(exc))
        raise UpstreamRefreshError(str(exc)) from None
    report = await sync_to_async(upstream_apply_discovery)(upstream_id=upstream_id, discovery=discovery)
    log.info("upstream %s refreshed: %s", upstream.name, report.summary())
    return report


@transaction.atomic
def upstream_publish(*, upstream: UpstreamServer, choices: dict[str, str | None]) -> RefreshReport:
    """Publish, rename or unpublish tools the last refresh discovered: ``choices`` maps an
    upstream tool name to its local name, or to None to unpublish it. Raises
    ValidationError naming the tool."""
    upstream = UpstreamServer.objects.select_for_update().get(pk=upstream.pk)
    report = RefreshReport()
    definitions = {}
    for raw in upstream.discovered_tools or []:
        definition, _ = _definition(raw, upstream)
        if definition is not None:
            definitions[definition["name"]] = definition
    published = {tool.backend_config.get("tool"): tool for tool in published_tools(upstream).select_for_update()}
    pattern = re.compile(TOOL_NAME_PATTERN)
    for upstream_name, name in choices.items():
        tool = published.get(upstream_name)
        if name is None:
            if tool is not None:
                tool.delete()
                report.withdrawn.append(tool.name)
            continue
        if not pattern.match(name):
            raise ValidationError(f"{upstream_name}: {name!r} is not a valid tool name (A-Z a-z 0-9 _ . -).")
        if _name_taken(upstream, name, exclude=tool.pk if tool else None):
            raise ValidationError(f"{upstream_name}: a tool named {name!r} already exists.")
        if tool is None:
            definition = definitions.get(upstream_name)
            if definition is None:
                raise ValidationError(f"{upstream_name}: the upstream does not offer a usable tool of that name.")
            _new_tool(upstream, upstream_name, name, definition["fields"])
            report.added.append(name)
        elif tool.name != name:
            tool.name = name
            catalog_entry_save(entry=tool)
            report.updated.append(name)
    return report
