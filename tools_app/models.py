"""Every model of the tools app, for Django's registry (app label ``tools_app``).

Each model lives with the part that owns it: the catalog (``Tool``, ``Resource``,
``ResourceTemplate``, ``Prompt``, ``AccessRule``), runs (``ToolRun``), backends
(``BackendSecret``, ``UpstreamServer``) and imports (``OpenApiSource``, ``OpenApiOperation``).
Import them from there; this module only makes Django find them.
"""

from tools_app.backends.models import BackendSecret
from tools_app.backends.upstream.models import UpstreamServer
from tools_app.catalog.models import (
    AccessRule,
    PendingDefinition,
    Prompt,
    Resource,
    ResourceTemplate,
    Tool,
    ToolCuration,
)
from tools_app.imports.openapi.models import OpenApiOperation, OpenApiSource
from tools_app.runs.models import Approval, ToolRun

__all__ = [
    "AccessRule",
    "Approval",
    "BackendSecret",
    "OpenApiOperation",
    "OpenApiSource",
    "PendingDefinition",
    "Prompt",
    "Resource",
    "ResourceTemplate",
    "Tool",
    "ToolCuration",
    "ToolRun",
    "UpstreamServer",
]
