"""Placeholder of the sandbox's agreed interface (the "sandbox" branch owns this module and
replaces it at merge): no isolation, so untrusted packages are refused unless the operator
opts out with ``TOOLBAY_SANDBOX_OPTOUT``."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings


@dataclass(frozen=True)
class SandboxSpec:
    package_dir: Path
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    allow_hosts: tuple[str, ...] = ()
    memory_bytes: int = 512 * 2**20
    cpu_seconds: int = 300
    max_processes: int = 64
    max_open_files: int = 256


@dataclass(frozen=True)
class SandboxStatus:
    available: bool
    mechanism: str
    reason: str


class SandboxRefused(Exception):
    """The package may not run here (no sandbox, and the operator did not opt out)."""


def sandbox_status() -> SandboxStatus:
    return SandboxStatus(False, "none", "this build has no sandbox")


async def spawn(spec: SandboxSpec, *, trusted: bool = False) -> asyncio.subprocess.Process:
    if not trusted and not settings.TOOLBAY_SANDBOX_OPTOUT:
        raise SandboxRefused("no sandbox is available and TOOLBAY_SANDBOX_OPTOUT is not set")
    home = spec.package_dir / ".home"
    home.mkdir(exist_ok=True)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), **spec.env}
    return await asyncio.create_subprocess_exec(
        *spec.argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=str(spec.package_dir),
        start_new_session=True,
    )
