"""The backend kinds the catalog accepts, and how a tool's backend settings are checked.

A tool names the backend that runs it (``Tool.backend_kind``) and that backend's settings.
The catalog must refuse settings that cannot work, but the backends sit above the catalog
(they run its tools), so the catalog never imports them: each backend kind registers its
checks here when ``tools_app.backends`` is imported at start-up, and the catalog (model
validation, forms) asks this registry.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any


class BackendConfigError(ValueError):
    """A backend configuration cannot work; the message is shown to the admin."""


def _no_references(config: dict[str, Any], *, tenant_id: int | None, feature: str = "tool") -> None:
    """Settings that name nothing outside the tool need no reference check."""


def _no_choices(*, tenant_ids: Collection[int] | None = None) -> dict[str, list[str]]:
    return {}


@dataclass(frozen=True)
class BackendKind:
    """What the catalog needs to know of one backend kind.

    ``validate_config(config)`` raises BackendConfigError for settings that cannot work;
    ``check_references(config, tenant_id=..., feature=...)`` raises it when they name
    something (a secret, an upstream server, a handler) the tool's catalog may not use;
    ``config_choices(tenant_ids=...)`` maps a setting to the values it may take in those
    tenants' catalogs (None: every catalog; the python backend's handler names), for forms
    to offer as a select. ``features`` maps what else the kind can serve
    (``resource``, ``template``, ``prompt``) to the check of its settings for that use.
    """

    name: str
    validate_config: Callable[[dict[str, Any]], None]
    check_references: Callable[..., None] = _no_references
    config_choices: Callable[..., dict[str, list[str]]] = field(default=_no_choices)
    features: dict[str, Callable[[dict[str, Any]], None]] = field(default_factory=dict)


_kinds: dict[str, BackendKind] = {}


def register(kind: BackendKind) -> None:
    _kinds[kind.name] = kind


def kind_for(name: str) -> BackendKind:
    """The registered kind; BackendConfigError for a name nobody registered."""
    try:
        return _kinds[name]
    except KeyError:
        raise BackendConfigError(f"unknown backend kind {name!r}") from None


def config_choices(name: str, setting: str, *, tenant_ids: Collection[int] | None = None) -> list[str]:
    """The values ``setting`` of backend ``name`` may take in the catalogs of ``tenant_ids``
    (None: every catalog); [] when it is free or unknown."""
    kind = _kinds.get(name)
    return kind.config_choices(tenant_ids=tenant_ids).get(setting, []) if kind is not None else []


FEATURE_LABELS = {"tool": "tools", "resource": "resources", "template": "resource templates", "prompt": "prompts"}


def backend_config_errors(kind_name: str, config: Any, *, tenant_id: int | None, feature: str = "tool") -> list[str]:
    """Problems with the backend settings of a tool (or a resource, template or prompt:
    ``feature``); [] when they are usable."""
    if not isinstance(config, dict):
        return ["The backend configuration must be a JSON object."]
    try:
        kind = kind_for(kind_name)
        if feature == "tool":
            kind.validate_config(config)
        elif feature in kind.features:
            kind.features[feature](config)
        else:
            raise BackendConfigError(f"the {kind_name} backend cannot serve {FEATURE_LABELS[feature]}")
        kind.check_references(config, tenant_id=tenant_id, feature=feature)
    except BackendConfigError as exc:
        return [str(exc)]
    return []
