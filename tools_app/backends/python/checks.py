"""A system check for bindings made before handlers were offered per catalog: a tenant's
private tool (or resource, template, prompt) bound to a handler its catalog may not bind
keeps running, but can no longer be saved as it is; the operator decides (offer the handler
to that tenant with ``catalogs=``, or rebind or delete the entry)."""

from __future__ import annotations

from typing import Any

from django.core import checks

from tools_app.backends.python.registry import HandlerKind, is_offered
from tools_app.catalog.checks import read_catalog_for_check
from tools_app.catalog.models import Prompt, Resource, ResourceTemplate, Tool

ENTRY_HANDLER_KINDS: tuple[tuple[type[Tool | Resource | ResourceTemplate | Prompt], HandlerKind], ...] = (
    (Tool, "tool"),
    (Resource, "resource"),
    (ResourceTemplate, "resource"),
    (Prompt, "prompt"),
)


def bindings_not_offered() -> list[str]:
    """``"<entry> (<tenant>): <handler>"`` for every private python entry whose handler its
    tenant's catalog may not bind (unregistered handlers included)."""
    found = []
    for model, kind in ENTRY_HANDLER_KINDS:
        rows = model.objects.filter(tenant__isnull=False, backend_kind="python").values_list(
            "name", "tenant__slug", "backend_config"
        )
        for name, slug, config in rows:
            handler = config.get("handler") if isinstance(config, dict) else None
            if not isinstance(handler, str) or not is_offered(kind, handler, slug):
                found.append(f"{model._meta.verbose_name} {name!r} ({slug}): {handler}")
    return found


@checks.register(checks.Tags.database)
def check_handler_bindings(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    found = read_catalog_for_check(databases, bindings_not_offered)
    if not found:
        return []
    return [
        checks.Warning(
            "Private catalog entries are bound to handlers their tenant may not bind: " + "; ".join(found[:20]),
            hint="Offer the handler to the tenant (@tool_handler(..., catalogs=(<slug>,)) or EVERY_CATALOG), "
            "or bind those entries to another handler; they cannot be saved as they are.",
            id="tools_app.W001",
        )
    ]
