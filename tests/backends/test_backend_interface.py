"""Every backend kind is a ``Backend`` (one typed interface, no probing of modules), and the
catalog checks settings through what each kind declares."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync

from tools_app.backends.base import Backend, BackendError
from tools_app.backends.registry import BACKENDS, backend_for
from tools_app.catalog.backend_kinds import BackendConfigError, backend_config_errors, kind_for


def test_each_kind_is_a_backend_registered_with_the_catalog() -> None:
    assert set(BACKENDS) == {"python", "http", "upstream_mcp"}
    for name, backend in BACKENDS.items():
        assert isinstance(backend, Backend) and backend.kind == name
        assert set(kind_for(name).features) == set(backend.features) == {"resource", "template", "prompt"}
    with pytest.raises(BackendConfigError, match="unknown backend kind 'shell'"):
        backend_for("shell")


def test_a_backend_must_implement_what_every_kind_does() -> None:
    class Incomplete(Backend):
        kind = "incomplete"

        def validate_config(self, config: dict[str, Any], *, feature: str = "tool") -> None: ...

    with pytest.raises(TypeError, match="call"):
        Incomplete()  # type: ignore[abstract]


def test_what_a_kind_does_not_serve_says_so() -> None:
    class ToolsOnly(Backend):
        kind = "tools-only"

        def validate_config(self, config: dict[str, Any], *, feature: str = "tool") -> None: ...

        async def call(self, tool: Any, arguments: dict[str, Any], ctx: Any) -> Any:
            return "ran"

    backend = ToolsOnly()
    with pytest.raises(BackendError, match="serves no resources"):
        async_to_sync(backend.read_resource)(None, "x://y", {}, ctx=None)  # type: ignore[arg-type]
    assert async_to_sync(backend.complete)(None, "a", "b", {}) is None  # type: ignore[arg-type]
    assert backend.config_choices() == {}


@pytest.mark.parametrize(
    ("kind", "feature", "config", "message"),
    [
        ("python", "prompt", {"handler": "x", "extra": 1}, "unknown python settings ['extra']"),
        ("upstream_mcp", "template", {"upstream": 1}, '"uri_template"'),
        ("http", "resource", {}, "url"),
    ],
)
def test_feature_settings_are_checked(kind: str, feature: str, config: dict[str, Any], message: str) -> None:
    (problem,) = backend_config_errors(kind, config, tenant_id=None, feature=feature)
    assert message in problem
