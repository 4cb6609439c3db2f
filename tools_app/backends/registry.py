"""Tool backends: one ``Backend`` (``tools_app.backends.base``) per kind, registered here.

Importing this module registers every kind with the catalog (``tools_app.catalog.backend_kinds``),
which validates tools' settings without importing the backends.
"""

from __future__ import annotations

import functools

from tools_app.backends.base import Backend, BackendConfigError
from tools_app.backends.http.backend import HttpBackend
from tools_app.backends.packaged import locator as _packaged_locator  # noqa: F401  (registers how instances are found)
from tools_app.backends.python.backend import PythonBackend
from tools_app.backends.upstream.backend import UpstreamBackend
from tools_app.catalog import backend_kinds

BACKENDS: dict[str, Backend] = {
    backend.kind: backend for backend in (PythonBackend(), HttpBackend(), UpstreamBackend())
}


def backend_for(kind: str) -> Backend:
    try:
        return BACKENDS[kind]
    except KeyError:
        raise BackendConfigError(f"unknown backend kind {kind!r}") from None


for _backend in BACKENDS.values():
    backend_kinds.register(
        backend_kinds.BackendKind(
            name=_backend.kind,
            validate_config=_backend.validate_config,
            check_references=_backend.check_references,
            config_choices=_backend.config_choices,
            features={
                feature: functools.partial(_backend.validate_config, feature=feature) for feature in _backend.features
            },
        )
    )
