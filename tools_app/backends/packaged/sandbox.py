"""The sandbox packaged MCP servers run in: bubblewrap, rlimits, and an egress proxy.

``spawn(spec)`` starts ``spec.argv`` inside bubblewrap and returns the asyncio process with
stdin/stdout/stderr pipes (stdout carries the MCP stdio stream; its StreamReader refuses a
line longer than ``spec.max_line_bytes``). The caller (the runner) owns the process: it
drains stdout and stderr, closes stdin to stop it gracefully, and ``kill()`` ends everything
inside at once (the sandbox has its own PID namespace and ``--die-with-parent``). When the
process ends, its proxy and its runtime directory are removed.

For the runner: log ``sandbox_status()`` at start-up (it probes once per process; when it is
not ``available``, ``spawn`` refuses untrusted packages unless ``TOOLBAY_SANDBOX_OPTOUT``).
``package_dir``, ``ro_paths`` and their parents must be readable (and traversable) by the
sandbox's uid: ``TOOLBAY_SANDBOX_UID`` (65534) when the runner is root, so keep the install
cache world-readable (``a+rX``) and outside ``/root``; a ``home_dir`` must be writable by
that uid (``chown`` it when root). ``egress_of(process)`` gives the proxy's ``refusals``
(for the admin's "last error").

What the server sees (everything else on the machine does not exist for it):

- ``/usr`` (and the ``/bin``, ``/lib*`` links) read-only; of ``/etc`` only CA certificates,
  the loader cache, time zone, alternatives and MIME types, plus a ``passwd``/``group``
  naming only itself and a ``hosts`` with ``localhost``; no ``/etc/shadow``;
- ``spec.package_dir`` and ``spec.ro_paths`` read-only, at the same paths as on the host;
- a private ``/tmp`` and ``HOME=/home/sandbox`` (tmpfs of ``max_file_bytes`` each, or
  ``spec.home_dir`` bind-mounted writable as the home);
- a fresh ``/proc`` of its own PID namespace (no other process of the machine), a minimal
  ``/dev``;
- only ``spec.env`` (plus ``HOME``, ``PATH``, ``LANG``, ``TMPDIR`` it does not set); nothing
  of the runner's environment. The environment travels to bubblewrap through a memfd
  (``--args``), never on a command line another user could read;
- a network namespace with only loopback. With ``spec.allow_hosts``, ``HTTP_PROXY`` and
  ``HTTPS_PROXY`` point at ``127.0.0.1:3128`` inside, which ``sandbox_shim`` forwards to
  this process's ``sandbox_egress`` proxy (listed hosts only, through the SSRF guard).
  Node's built-in ``fetch`` ignores those variables before Node 24: with ``spec.node_proxy``
  (an installed undici, see ``node_proxy``) a preload makes it use them; without, it has no
  network at all.

Namespaces: user (its uid is 1000 inside, mapped to the runner's uid, or to
``TOOLBAY_SANDBOX_UID`` when the runner is root), PID, IPC, UTS, cgroup, network, mount;
``--new-session`` (no terminal injection), ``--disable-userns`` (no nested namespaces).

Limits (set inside the new user namespace with ``prlimit``, so they cannot be raised):
``RLIMIT_DATA`` = ``memory_bytes`` per process (heap and every private writable mapping;
unlike ``RLIMIT_AS`` it does not break V8's address-space reservations), ``RLIMIT_CPU`` =
``cpu_seconds`` per process (SIGXCPU, then SIGKILL 2 s later), ``RLIMIT_NPROC`` =
``max_processes`` (threads count: Node needs about 11), ``RLIMIT_NOFILE``,
``RLIMIT_FSIZE`` = ``max_file_bytes``, no core dumps. Since Linux 5.14 ``RLIMIT_NPROC`` is
counted per user namespace, so each sandbox has its own budget: a fork bomb in one cannot
starve another sandbox or the host. The limit must be set after the namespace exists:
a namespace's creator passes its own ``RLIMIT_NPROC`` on as the ceiling for all processes
of that uid, which would make every sandbox share one budget.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import shutil
import subprocess
import tempfile
import weakref
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings

from tools_app.backends.packaged.node_proxy import INSIDE as NODE_PROXY_INSIDE
from tools_app.backends.packaged.node_proxy import PRELOAD as NODE_PROXY_PRELOAD
from tools_app.backends.packaged.sandbox_egress import EgressProxy, HostPolicy

log = logging.getLogger(__name__)

INSIDE_UID = 1000
INSIDE_HOME = "/home/sandbox"
RUNTIME_INSIDE = "/run/toolbay"
PROXY_PORT = 3128
PRLIMIT = "/usr/bin/prlimit"
# How an instance's resources are bounded, for the start-up log and /readyz. Per-process rlimits
# only: a per-instance cgroup (memory.max, pids.max) needs a delegated cgroup v2 subtree with
# those controllers, which this runner cannot assume (README, "Packaged servers").
LIMITS = "rlimits per process (memory, CPU time, processes, open files, file size); no per-instance cgroup"
SYSTEM_PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3")
# /etc entries a program may need and that hold nothing about the machine's users or secrets.
ETC_ENTRIES = (
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "pki",
    "crypto-policies",
    "alternatives",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "mime.types",
    "os-release",
)
SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
SHIM = Path(__file__).with_name("sandbox_shim.py")
PROBE_TIMEOUT_SECONDS = 10.0


class SandboxUnavailable(Exception):
    """No sandbox on this machine and the package is untrusted, or the spec asks for what
    this machine cannot give (the message says why)."""


@dataclass(frozen=True)
class SandboxSpec:
    package_dir: Path  # the installed package, mounted read-only at the same path inside
    argv: list[str]  # command to run inside (absolute paths as seen from inside)
    env: dict[str, str]  # the environment inside (nothing of the runner's is inherited)
    allow_hosts: tuple[str, ...] = ()  # "host" (ports 80, 443) or "host:port"; empty: no network
    memory_bytes: int = 512 * 2**20  # RLIMIT_DATA, per process
    cpu_seconds: int = 300  # RLIMIT_CPU, per process (a warm instance that reaches it is restarted)
    max_processes: int = 64  # RLIMIT_NPROC in the sandbox's own user namespace (threads count)
    max_open_files: int = 256
    # Largest file the server may write (RLIMIT_FSIZE), and the size of its tmpfs /tmp and home.
    max_file_bytes: int = 64 * 2**20
    # Longest line the returned process's stdout StreamReader accepts (readline raises beyond).
    max_line_bytes: int = 16 * 2**20
    # Further read-only mounts the command needs (its interpreter when not under /usr); they
    # must be readable by the sandbox's uid (65534 when the runner is root).
    ro_paths: tuple[Path, ...] = field(default=())
    # A writable directory mounted as the home (persistent per instance); None: a tmpfs.
    home_dir: Path | None = None
    # An installed undici package (node_proxy.undici_dir()): with allowed hosts, Node's fetch
    # is made to use the proxy variables by a preload (NODE_OPTIONS).
    node_proxy: Path | None = None


@dataclass(frozen=True)
class SandboxStatus:
    available: bool
    mechanism: str  # "bubblewrap" or "none"
    reason: str  # why not available, or what is used


def _outside_ids() -> tuple[int, int] | None:
    """The uid/gid sandboxes run as on the host when the runner is root; None otherwise."""
    if os.geteuid() != 0:
        return None
    return settings.TOOLBAY_SANDBOX_UID, settings.TOOLBAY_SANDBOX_GID


def _bwrap_path() -> str | None:
    configured = settings.TOOLBAY_SANDBOX_BWRAP
    return (
        shutil.which(configured) if "/" not in configured else (configured if os.access(configured, os.X_OK) else None)
    )


def _system_args() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for path in SYSTEM_LINKS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    args += ["--dir", "/etc"]
    for name in ETC_ENTRIES:
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    return args


NAMESPACE_ARGS = [
    "--unshare-all",
    "--unshare-user",
    "--disable-userns",
    "--uid",
    str(INSIDE_UID),
    "--gid",
    str(INSIDE_UID),
    "--hostname",
    "sandbox",
    "--die-with-parent",
    "--new-session",
    "--proc",
    "/proc",
    "--dev",
    "/dev",
]


@functools.cache
def sandbox_status() -> SandboxStatus:
    """Whether bubblewrap works here, found once per process (``sandbox_status.cache_clear()``
    after changing the settings). It runs ``true`` in a sandbox to find out."""
    bwrap = _bwrap_path()
    if bwrap is None:
        return SandboxStatus(
            False, "none", f"bubblewrap not found (TOOLBAY_SANDBOX_BWRAP={settings.TOOLBAY_SANDBOX_BWRAP!r})"
        )
    if not os.access(PRLIMIT, os.X_OK):
        return SandboxStatus(False, "none", f"{PRLIMIT} (util-linux) not found: limits cannot be set")
    ids = _outside_ids()
    try:
        probe = subprocess.run(
            [bwrap, *NAMESPACE_ARGS, *_system_args(), "--", PRLIMIT, "--nproc=8", "--", "/usr/bin/true"],
            capture_output=True,
            timeout=PROBE_TIMEOUT_SECONDS,
            env={"PATH": "/usr/bin:/bin"},
            user=ids[0] if ids else None,
            group=ids[1] if ids else None,
            extra_groups=[] if ids else None,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return SandboxStatus(False, "none", f"bubblewrap could not run: {exc}")
    if probe.returncode != 0:
        message = probe.stderr.decode(errors="replace").strip() or f"exit status {probe.returncode}"
        return SandboxStatus(False, "none", f"bubblewrap cannot create a sandbox here: {message}")
    version = subprocess.run([bwrap, "--version"], capture_output=True, check=False).stdout.decode().strip()
    as_uid = f"uid {ids[0]}" if ids else f"uid {os.geteuid()}"
    return SandboxStatus(True, "bubblewrap", f"{version or 'bubblewrap'}: user namespaces, runs as {as_uid}")


def sandbox_readiness() -> str:
    """One word for /readyz: ``bubblewrap``, ``opted-out`` (no sandbox, and untrusted packages
    run anyway) or ``unavailable`` (no sandbox; untrusted packages are refused)."""
    status = sandbox_status()
    if status.available:
        return status.mechanism
    return "opted-out" if settings.TOOLBAY_SANDBOX_OPTOUT else "unavailable"


_egress: weakref.WeakKeyDictionary[asyncio.subprocess.Process, EgressProxy] = weakref.WeakKeyDictionary()
_watchers: set[asyncio.Task[None]] = set()


def egress_of(process: asyncio.subprocess.Process) -> EgressProxy | None:
    """The egress proxy of a sandboxed process (its ``refusals`` and ``connections``), if any."""
    return _egress.get(process)


def _validate(spec: SandboxSpec) -> HostPolicy:
    if not spec.argv:
        raise ValueError("the sandbox needs a command (argv is empty)")
    if not spec.package_dir.is_absolute() or not spec.package_dir.is_dir():
        raise ValueError(f"package directory {spec.package_dir} is not an existing absolute path")
    for path in (*spec.ro_paths, *([spec.node_proxy] if spec.node_proxy else [])):
        if not path.is_absolute() or not path.exists():
            raise ValueError(f"read-only path {path} is not an existing absolute path")
    for key, value in spec.env.items():
        if not key or "=" in key or "\0" in key or "\0" in value:
            raise ValueError(f"environment variable {key!r}: names may not be empty or hold '=' or NUL")
    for name, limit in (
        ("memory_bytes", spec.memory_bytes),
        ("cpu_seconds", spec.cpu_seconds),
        ("max_processes", spec.max_processes),
        ("max_open_files", spec.max_open_files),
        ("max_file_bytes", spec.max_file_bytes),
        ("max_line_bytes", spec.max_line_bytes),
    ):
        if limit < 1:
            raise ValueError(f"{name} must be positive, got {limit}")
    return HostPolicy.parse(spec.allow_hosts)


def _limits(spec: SandboxSpec) -> list[str]:
    return [
        PRLIMIT,
        f"--data={spec.memory_bytes}",
        f"--cpu={spec.cpu_seconds}:{spec.cpu_seconds + 2}",
        f"--nproc={spec.max_processes}",
        f"--nofile={spec.max_open_files}",
        f"--fsize={spec.max_file_bytes}",
        "--core=0",
        "--",
    ]


def _environment(spec: SandboxSpec, *, proxy: bool) -> dict[str, str]:
    env = {"HOME": INSIDE_HOME, "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "TMPDIR": "/tmp"}
    env.update(spec.env)
    if proxy:
        url = f"http://127.0.0.1:{PROXY_PORT}"
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
            env[name] = url
        env["NODE_USE_ENV_PROXY"] = "1"  # Node 24+ honours the variables above with it
        env.pop("NO_PROXY", None)
        env.pop("no_proxy", None)
        if spec.node_proxy is not None:  # older Node: the preload does (node_proxy)
            preload = f"--require {NODE_PROXY_INSIDE}/preload.cjs"
            env["NODE_OPTIONS"] = f"{env['NODE_OPTIONS']} {preload}" if env.get("NODE_OPTIONS") else preload
    return env


def _write_runtime_files(runtime: Path, ids: tuple[int, int] | None) -> None:
    (runtime / "passwd").write_text(f"sandbox:x:{INSIDE_UID}:{INSIDE_UID}:sandbox:{INSIDE_HOME}:/usr/sbin/nologin\n")
    (runtime / "group").write_text(f"sandbox:x:{INSIDE_UID}:\n")
    (runtime / "hosts").write_text("127.0.0.1 localhost sandbox\n::1 localhost\n")
    for name in ("passwd", "group", "hosts"):
        (runtime / name).chmod(0o644)
    # bubblewrap runs as the sandbox's uid and must reach these files, nobody else may list them.
    runtime.chmod(0o711)


def _python_inside() -> str:
    for path in SYSTEM_PYTHONS:
        if os.access(path, os.X_OK):
            return path
    raise SandboxUnavailable("allowed hosts need a system python3 under /usr for the sandbox's proxy door")


def _bwrap_args(spec: SandboxSpec, runtime: Path, *, proxy: bool) -> tuple[list[str], list[str]]:
    """bubblewrap's options (for the memfd: they hold the environment) and the command."""
    args = [*NAMESPACE_ARGS, *_system_args()]
    for name in ("passwd", "group", "hosts"):
        args += ["--ro-bind", str(runtime / name), f"/etc/{name}"]
    args += ["--size", str(spec.max_file_bytes), "--tmpfs", "/tmp"]
    if spec.home_dir is not None:
        args += ["--bind", str(spec.home_dir), INSIDE_HOME]
    else:
        args += ["--size", str(spec.max_file_bytes), "--tmpfs", INSIDE_HOME]
    args += ["--ro-bind", str(spec.package_dir), str(spec.package_dir)]
    for path in spec.ro_paths:
        args += ["--ro-bind", str(path), str(path)]
    command = _limits(spec)
    if proxy:
        args += ["--dir", RUNTIME_INSIDE]
        args += ["--ro-bind", str(runtime / "egress.sock"), f"{RUNTIME_INSIDE}/egress.sock"]
        args += ["--ro-bind", str(SHIM), f"{RUNTIME_INSIDE}/shim.py"]
        if spec.node_proxy is not None:
            args += ["--ro-bind", str(NODE_PROXY_PRELOAD), f"{NODE_PROXY_INSIDE}/preload.cjs"]
            args += ["--ro-bind", str(spec.node_proxy), f"{NODE_PROXY_INSIDE}/undici"]
        command += [
            _python_inside(),
            "-I",
            f"{RUNTIME_INSIDE}/shim.py",
            str(PROXY_PORT),
            f"{RUNTIME_INSIDE}/egress.sock",
            "--",
        ]
    args += ["--chdir", INSIDE_HOME, "--clearenv"]
    for key, value in _environment(spec, proxy=proxy).items():
        args += ["--setenv", key, value]
    return args, [*command, *spec.argv]


def _args_fd(args: list[str]) -> int:
    """A memfd holding ``args`` NUL-separated, for ``bwrap --args FD`` (secrets in the
    environment stay off every command line)."""
    fd = os.memfd_create("toolbay-sandbox-args", os.MFD_CLOEXEC)
    os.write(fd, b"".join(arg.encode() + b"\0" for arg in args))
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


async def _clean_up(process: asyncio.subprocess.Process, proxy: EgressProxy | None, runtime: Path) -> None:
    try:
        await process.wait()
    finally:
        if proxy is not None:
            proxy.close()
        shutil.rmtree(runtime, ignore_errors=True)


async def spawn(spec: SandboxSpec, *, trusted: bool = False) -> asyncio.subprocess.Process:
    """Start ``spec.argv`` sandboxed; see the module's docstring for what it sees.

    Raises ValueError on a spec that cannot work (the message says which field), and
    SandboxUnavailable when no sandbox is available and ``trusted`` is False, unless
    ``settings.TOOLBAY_SANDBOX_OPTOUT`` is set: then (and for trusted commands) the command
    runs unsandboxed, with the clean environment and the limits but without network rules.
    """
    policy = _validate(spec)
    status = sandbox_status()
    ids = _outside_ids()
    if not status.available:
        if not (trusted or settings.TOOLBAY_SANDBOX_OPTOUT):
            raise SandboxUnavailable(
                f"no sandbox: {status.reason}; untrusted packages are refused "
                "(TOOLBAY_SANDBOX_OPTOUT=1 runs them unsandboxed)"
            )
        log.warning("running %s WITHOUT a sandbox (%s)", spec.argv[0], status.reason)
        home = Path(tempfile.mkdtemp(prefix="toolbay-unsandboxed-"))
        if ids:
            os.chown(home, ids[0], ids[1])
        env = _environment(spec, proxy=False) | {"HOME": str(spec.home_dir or home), "TMPDIR": str(home)}
        command = [*_limits(spec), *spec.argv] if os.access(PRLIMIT, os.X_OK) else list(spec.argv)
        process = await _exec(command, spec, ids, env=env, cwd=home)
        _watch(process, None, home)
        return process

    bwrap = _bwrap_path()
    assert bwrap is not None
    runtime = Path(tempfile.mkdtemp(prefix="toolbay-sandbox-"))
    proxy: EgressProxy | None = None
    fd = -1
    try:
        _write_runtime_files(runtime, ids)
        if policy.pairs:
            proxy = EgressProxy(policy, str(runtime / "egress.sock"))
            await proxy.start()
            if ids:
                os.chown(runtime / "egress.sock", ids[0], ids[1])
            (runtime / "egress.sock").chmod(0o600)
        options, command = _bwrap_args(spec, runtime, proxy=proxy is not None)
        fd = _args_fd(options)
        process = await _exec(
            [bwrap, "--args", str(fd), "--", *command], spec, ids, env={"PATH": "/usr/bin:/bin"}, fd=fd
        )
    except BaseException:
        if proxy is not None:
            proxy.close()
        shutil.rmtree(runtime, ignore_errors=True)
        raise
    finally:
        if fd >= 0:
            os.close(fd)
    if proxy is not None:
        _egress[process] = proxy
    _watch(process, proxy, runtime)
    return process


async def _exec(
    argv: list[str],
    spec: SandboxSpec,
    ids: tuple[int, int] | None,
    *,
    env: dict[str, str],
    cwd: Path | None = None,
    fd: int | None = None,
) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        limit=spec.max_line_bytes,
        env=env,
        cwd=cwd,
        pass_fds=(fd,) if fd is not None else (),
        user=ids[0] if ids else None,
        group=ids[1] if ids else None,
        extra_groups=[] if ids else None,
    )


def _watch(process: asyncio.subprocess.Process, proxy: EgressProxy | None, runtime: Path) -> None:
    task = asyncio.get_running_loop().create_task(_clean_up(process, proxy, runtime))
    _watchers.add(task)
    task.add_done_callback(_watchers.discard)


__all__ = [
    "SandboxSpec",
    "SandboxStatus",
    "SandboxUnavailable",
    "egress_of",
    "sandbox_readiness",
    "sandbox_status",
    "spawn",
]
