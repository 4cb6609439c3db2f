"""The tools app's admin screens, registered here from the parts that define them.

The tool admin is the catalog's, with the "Test call" page of the call runtime added; the
access-rule admin registers itself in ``tools_app.catalog.admin``, secrets and upstream
servers in their backends' admin modules.
"""

from django.contrib import admin

from tools_app.backends import admin as _secrets_admin  # noqa: F401  (registers BackendSecret)
from tools_app.backends.upstream import admin as _upstream_admin  # noqa: F401  (registers UpstreamServer)
from tools_app.catalog import admin as catalog_admin
from tools_app.catalog import pinning_admin as _pinning_admin  # noqa: F401  (registers PendingDefinition)
from tools_app.catalog.models import Tool
from tools_app.imports.openapi import admin as _openapi_admin  # noqa: F401  (registers OpenAPI sources)
from tools_app.runs.admin import ToolTestCallMixin


@admin.register(Tool)
class ToolAdmin(ToolTestCallMixin, catalog_admin.ToolAdmin):
    pass
