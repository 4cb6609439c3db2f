"""Node's built-in ``fetch`` through the sandbox's egress proxy.

Node before 24 (22.21 with ``NODE_USE_ENV_PROXY``) ignores ``HTTP_PROXY``/``HTTPS_PROXY`` in
its built-in ``fetch``, so a Node server in a sandbox with allowed hosts would have no network
at all: the sandbox has no route out but the proxy. Node's ``fetch`` is undici, and it uses
whatever dispatcher is installed as undici's global one (a process-wide symbol every undici
copy shares). So for npm servers with allowed hosts the sandbox preloads (``NODE_OPTIONS=
--require``) ``node_proxy_preload.cjs``, which installs undici's ``EnvHttpProxyAgent``, the
dispatcher that honours those variables, from the npm package ``undici`` at exactly the
version the machine's Node bundles (``process.versions.undici``: the same code its ``fetch``
runs, so the dispatcher contract matches). That package is installed once per machine into
the package cache like any npm server (``--ignore-scripts``, integrity recorded) and mounted
read-only. Clients that use ``http``/``https`` directly (axios, node-fetch, got) honour the
variables only if they themselves read them; that is theirs to do, as outside a sandbox.
"""

from __future__ import annotations

import functools
import logging
import shutil
import subprocess
from pathlib import Path

from tools_app.backends.packaged.install import InstallError, install

log = logging.getLogger(__name__)

PRELOAD = Path(__file__).with_name("node_proxy_preload.cjs")
INSIDE = "/run/toolbay/node-proxy"  # where the sandbox sees the preload and undici


@functools.cache
def node_undici_version() -> str | None:
    """The undici version the machine's ``node`` bundles (None without node)."""
    node = shutil.which("node")
    if node is None:
        return None
    try:
        found = subprocess.run(
            [node, "-p", "process.versions.undici"], capture_output=True, text=True, timeout=30, check=True
        )
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("cannot ask node for its undici version: %s", exc)
        return None
    version = found.stdout.strip()
    return version if version and version != "undefined" else None


def undici_dir() -> Path | None:
    """The installed undici for the preload (installing it once); None when it cannot be had,
    and then Node servers' ``fetch`` has no network (logged)."""
    version = node_undici_version()
    if version is None:
        return None
    try:
        done = install("npm", "undici", version, library=True)
    except InstallError as exc:
        log.warning("Node servers' fetch cannot reach allowed hosts: no undici %s: %s", version, exc)
        return None
    return done.directory / "node_modules" / "undici"
