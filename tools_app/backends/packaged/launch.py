"""What it takes to start a packaged server: its settings read from the database, secrets
opened, the package installed (once per version per machine) and the install recorded."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.utils import timezone

from tools_app.backends.models import BackendSecret, owned_by
from tools_app.backends.packaged import node_proxy
from tools_app.backends.packaged.install import Installed, InstallError, install
from tools_app.backends.upstream.models import UpstreamServer
from tools_app.backends.vault import SecretUnavailable, unseal

FINGERPRINT_FIELDS = (
    "kind",
    "package",
    "version",
    "command",
    "args",
    "env",
    "env_secrets",
    "allow_hosts",
    "per_user",
    "trusted",
    "enabled",
)


class LaunchRefused(Exception):
    """The server cannot be started as configured; the message is for operators and callers."""


@dataclass(frozen=True)
class Launch:
    upstream_id: int
    name: str
    tenant_id: int | None
    kind: str
    package: str
    version: str
    argv: list[str]
    package_dir: Path
    env: dict[str, str]
    allow_hosts: tuple[str, ...]
    trusted: bool
    fingerprint: str
    secret_values: tuple[str, ...]
    ro_paths: tuple[Path, ...] = ()
    node_proxy: Path | None = None  # undici for Node's fetch through the sandbox's proxy


def fingerprint(values: dict[str, Any]) -> str:
    """Changes when a setting that the running instance depends on changes (secrets included)."""
    return hashlib.sha256(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()[:16]


def fingerprints(upstream_ids: list[int]) -> dict[int, str]:
    """Current fingerprints of these servers (missing ones are absent)."""
    rows = UpstreamServer.objects.filter(pk__in=upstream_ids).values("pk", "tenant_id", *FINGERPRINT_FIELDS)
    found = {}
    for row in rows:
        secrets = dict(
            BackendSecret.objects.filter(
                owned_by(row["tenant_id"]), name__in=list((row["env_secrets"] or {}).values())
            ).values_list("name", "updated_at")
        )
        found[row["pk"]] = fingerprint({**row, "secrets": secrets})
    return found


def record_install(upstream_id: int, *, installed: Installed | None, error: str = "") -> None:
    if installed is not None:
        UpstreamServer.objects.filter(pk=upstream_id).exclude(
            install_state=UpstreamServer.InstallState.INSTALLED, integrity=installed.integrity
        ).update(
            install_state=UpstreamServer.InstallState.INSTALLED,
            install_error="",
            integrity=installed.integrity,
            installed_at=timezone.now(),
        )
    else:
        UpstreamServer.objects.filter(pk=upstream_id).update(
            install_state=UpstreamServer.InstallState.FAILED, install_error=error[:4000]
        )


def install_server(upstream: UpstreamServer) -> Installed:
    """Install the server's package (if not yet on this machine) and record the outcome;
    raises InstallError."""
    try:
        done = install(upstream.kind, upstream.package, upstream.version)
    except InstallError as exc:
        record_install(upstream.pk, installed=None, error=str(exc))
        raise
    record_install(upstream.pk, installed=done)
    return done


def scratch_dir(upstream_id: int) -> Path:
    path = Path(settings.TOOLBAY_PACKAGE_CACHE) / "commands" / str(upstream_id)
    path.mkdir(parents=True, exist_ok=True)
    return path


def interpreter_paths(program: str) -> tuple[Path, ...]:
    """The installation an interpreter lives in when it is not part of the system (/usr), which a
    sandbox must show read-only: a venv's python links to e.g. /root/.pyenv/versions/3.11.7."""
    real = Path(os.path.realpath(program))
    if real.is_relative_to("/usr") or real.is_relative_to(settings.TOOLBAY_PACKAGE_CACHE):
        return ()
    return (real.parents[1],)


def launch_of(upstream_id: int) -> Launch:
    """Everything to start the server; raises LaunchRefused (and records an install failure)."""
    upstream = UpstreamServer.objects.filter(pk=upstream_id).first()
    if upstream is None or not upstream.packaged:
        raise LaunchRefused("the packaged server no longer exists")
    if not upstream.enabled:
        raise LaunchRefused(f"packaged server {upstream.name} is disabled")
    env = dict(upstream.env or {})
    secret_values: list[str] = []
    if upstream.env_secrets:
        secrets = {
            s.name: s
            for s in BackendSecret.objects.filter(owned_by(upstream.tenant_id), name__in=upstream.env_secrets.values())
        }
        for variable, secret_name in upstream.env_secrets.items():
            secret = secrets.get(secret_name)
            if secret is None:
                raise LaunchRefused(f"the secret {secret_name!r} of {variable} does not exist")
            try:
                env[variable] = unseal(secret.ciphertext, name=secret.name)
            except SecretUnavailable as exc:
                raise LaunchRefused(str(exc)) from None
            secret_values.append(env[variable])
    if upstream.kind == UpstreamServer.Kind.COMMAND:
        argv = [*upstream.command, *upstream.args]
        package_dir = scratch_dir(upstream.pk)
    else:
        try:
            done = install_server(upstream)
        except InstallError as exc:
            raise LaunchRefused(f"install failed: {exc}") from None
        argv = [*done.argv, *upstream.args]
        package_dir = done.directory
    ro_paths = interpreter_paths(argv[0])
    allow_hosts = tuple(upstream.allow_hosts or ())
    # Node's fetch reaches the allowed hosts only through the preload (node_proxy).
    proxy_for_node = node_proxy.undici_dir() if allow_hosts and upstream.kind == UpstreamServer.Kind.NPM else None
    secrets_now = dict(
        BackendSecret.objects.filter(
            owned_by(upstream.tenant_id), name__in=list((upstream.env_secrets or {}).values())
        ).values_list("name", "updated_at")
    )
    values = {
        "pk": upstream.pk,
        "tenant_id": upstream.tenant_id,
        **{f: getattr(upstream, f) for f in FINGERPRINT_FIELDS},
    }
    return Launch(
        upstream_id=upstream.pk,
        name=upstream.name,
        tenant_id=upstream.tenant_id,
        kind=upstream.kind,
        package=upstream.package,
        version=upstream.version,
        argv=argv,
        package_dir=package_dir,
        env=env,
        allow_hosts=allow_hosts,
        trusted=upstream.trusted,
        fingerprint=fingerprint({**values, "secrets": secrets_now}),
        secret_values=tuple(secret_values),
        ro_paths=ro_paths,
        node_proxy=proxy_for_node,
    )


def preinstall_enabled() -> None:
    """Install every enabled npm/PyPI server on this machine (a runner does it when it starts),
    so a first call here does not wait for an install; failures are recorded, not raised."""
    servers = UpstreamServer.objects.filter(
        enabled=True, kind__in=[UpstreamServer.Kind.NPM, UpstreamServer.Kind.PYPI]
    ).order_by("pk")
    for server in servers:  # one install per version; the rest find it in the cache
        with contextlib.suppress(InstallError):
            install_server(server)
