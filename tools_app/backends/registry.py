"""Tool backends: each kind is a module with the same small interface, registered here.

``validate_config(config)`` raises ``BackendConfigError`` with a message for the admin;
modules that also serve resources and prompts add ``validate_resource_config``
(``validate_template_config`` where templates differ), ``validate_prompt_config``, and
``async read_resource(entry, uri, variables)``, ``async get_prompt(prompt, arguments)`` and
``async complete(entry, argument, value, context)``;
``async call(tool, arguments, ctx)`` returns the handler's output (normalized later) or
raises ``ToolError`` (a message for the model) or ``BackendError`` (with ``retryable``).
A backend that runs blocking code in a thread marks ``ctx.blocking`` and sets
``ctx.handler_returned`` from that thread when it really stopped; for everything else
``execute`` sets it when ``call`` returns (a worker that does not see it set after a
timeout or cancellation kills its process).
Optionally ``check_references(config, tenant_id=...)`` raises ``BackendConfigError`` when
the settings name something (a secret, an upstream server) the tool's tenant lacks.

Importing this module registers every kind with the catalog (``tools_app.catalog.backend_kinds``),
which validates tools' settings without importing the backends.
"""

from __future__ import annotations

from types import ModuleType

from tools_app.backends.base import BackendConfigError
from tools_app.backends.http import backend as http
from tools_app.backends.python import backend as python
from tools_app.backends.upstream import backend as upstream_mcp
from tools_app.catalog import backend_kinds

BACKENDS: dict[str, ModuleType] = {"python": python, "http": http, "upstream_mcp": upstream_mcp}


def backend_for(kind: str) -> ModuleType:
    try:
        return BACKENDS[kind]
    except KeyError:
        raise BackendConfigError(f"unknown backend kind {kind!r}") from None


# Which check of a module's settings applies when it serves a resource, a template or a prompt.
FEATURE_CHECKS = {
    "resource": "validate_resource_config",
    "template": "validate_template_config",
    "prompt": "validate_prompt_config",
}

for _name, _module in BACKENDS.items():
    _hooks = {hook: getattr(_module, hook) for hook in ("check_references", "config_choices") if hasattr(_module, hook)}
    _features = {
        feature: getattr(_module, check, None) or _module.validate_resource_config
        for feature, check in FEATURE_CHECKS.items()
        if hasattr(_module, check) or (feature == "template" and hasattr(_module, "validate_resource_config"))
    }
    backend_kinds.register(
        backend_kinds.BackendKind(name=_name, validate_config=_module.validate_config, features=_features, **_hooks)
    )
