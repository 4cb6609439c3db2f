"""Installing packaged MCP servers into a content-addressed cache.

Each (kind, package, exact version, and for PyPI the interpreter) has one directory under
``TOOLBAY_PACKAGE_CACHE``, named by a hash of those: ``<cache>/<kind>/<digest>-<name>-<version>``.
An install happens once per version per machine (a file lock makes concurrent installers
wait for the first one), into a temporary directory renamed into place when complete, so a
half-finished install is never used. Nothing is installed on the call path: the runner
installs before it starts an instance, ``add_upstream`` and the admin when a server is saved.

- npm: ``npm install --ignore-scripts`` (an install script would run unsandboxed code) of
  exactly ``name@version`` into the directory; ``package-lock.json`` records every
  dependency's integrity, and the package's own (``sha512-…``) is what is recorded.
- PyPI: a virtualenv made by ``uv``, the dependency set locked with hashes (``uv pip compile
  --generate-hashes``) and installed with ``--require-hashes``; the lock's sha256 is recorded.

The downloads are cached too (npm's and uv's caches live under the same directory), so an
install that was removed is rebuilt without the network.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from django.conf import settings

INSTALL_TIMEOUT_SECONDS = 600
MANIFEST = "toolbay-install.json"
ERROR_CHARS = 2000


class InstallError(Exception):
    """The package could not be installed or has no entry point; the message is for the admin."""


@dataclass(frozen=True)
class Installed:
    directory: Path
    argv: list[str]  # the command that starts the server (absolute paths, no shell)
    integrity: str
    version: str


def cache_root() -> Path:
    return Path(settings.TOOLBAY_PACKAGE_CACHE)


def packaged_python() -> str:
    """The interpreter PyPI servers' virtualenvs are made with: a system one where there is one
    (a sandbox shows the system read-only, not a user's home), else the one running Toolbay."""
    configured = settings.TOOLBAY_PACKAGED_PYTHON
    if configured:
        return configured
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate
    return getattr(sys, "_base_executable", sys.executable)


def _uv() -> str:
    beside = Path(sys.executable).parent / "uv"
    found = str(beside) if beside.exists() else shutil.which("uv")
    if not found:
        raise InstallError("uv is not installed (it is in requirements.txt)")
    return found


def _npm() -> str:
    found = shutil.which("npm")
    if not found:
        raise InstallError("npm is not installed on this machine (Node.js 18 or newer is needed for npm servers)")
    return found


def install_dir(kind: str, package: str, version: str) -> Path:
    identity = [kind, package, version]
    if kind == "pypi":
        identity.append(os.path.realpath(packaged_python()))
    digest = hashlib.sha256("\0".join(identity).encode()).hexdigest()[:16]
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", f"{package}-{version}")[:80]
    return cache_root() / kind / f"{digest}-{safe}"


def _run(argv: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None, what: str) -> str:
    try:
        done = subprocess.run(
            argv,
            cwd=cwd,
            env={**os.environ, **(env or {})},
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_SECONDS,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise InstallError(f"{what} took longer than {INSTALL_TIMEOUT_SECONDS} s") from None
    except OSError as exc:
        raise InstallError(f"{what} could not start: {exc}") from None
    if done.returncode != 0:
        output = (done.stderr.strip() or done.stdout.strip())[-ERROR_CHARS:]
        raise InstallError(f"{what} failed (exit {done.returncode}): {output}")
    return done.stdout


@contextlib.contextmanager
def _locked(target: Path) -> Iterator[None]:
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_name(target.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _manifest(directory: Path) -> Installed | None:
    try:
        data = json.loads((directory / MANIFEST).read_text())
        return Installed(directory, list(data["argv"]), str(data["integrity"]), str(data["version"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def installed(kind: str, package: str, version: str) -> Installed | None:
    """The complete install of that version on this machine, or None."""
    return _manifest(install_dir(kind, package, version))


def install(kind: str, package: str, version: str, *, library: bool = False) -> Installed:
    """Install (once) and return where; raises InstallError with the reason. ``library``: an
    npm package that is not a program (its ``argv`` is empty), e.g. the sandbox's Node proxy."""
    if kind not in ("npm", "pypi"):
        raise InstallError(f"cannot install a {kind!r} server")
    target = install_dir(kind, package, version)
    with _locked(target):
        done = _manifest(target)
        if done is not None:
            return done
        staging = target.with_name(f"{target.name}.partial-{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        try:
            if kind == "npm":
                argv_in, integrity = _install_npm(staging, package, version, library=library)
            else:
                argv_in, integrity = _install_pypi(staging, package, version)
            # Paths inside the staging directory become paths inside the final one.
            argv = [part.replace(str(staging), str(target)) for part in argv_in]
            (staging / MANIFEST).write_text(
                json.dumps({"kind": kind, "package": package, "version": version, "argv": argv, "integrity": integrity})
            )
            shutil.rmtree(target, ignore_errors=True)
            staging.rename(target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    result = _manifest(target)
    assert result is not None
    return result


# --- npm ----------------------------------------------------------------------------------------


def _install_npm(directory: Path, package: str, version: str, *, library: bool = False) -> tuple[list[str], str]:
    node = shutil.which("node")
    if not node:
        raise InstallError("node is not installed on this machine")
    (directory / "package.json").write_text(json.dumps({"name": "toolbay-packaged", "private": True}))
    _run(
        [
            _npm(),
            "install",
            "--no-audit",
            "--no-fund",
            "--ignore-scripts",
            "--save-exact",
            "--cache",
            str(cache_root() / "npm-cache"),
            f"{package}@{version}",
        ],
        cwd=directory,
        env={"npm_config_update_notifier": "false"},
        what=f"npm install {package}@{version}",
    )
    lock = json.loads((directory / "package-lock.json").read_text())
    entry = lock.get("packages", {}).get(f"node_modules/{package}", {})
    if entry.get("version") != version:
        raise InstallError(f"npm installed {package} {entry.get('version')!r}, not {version}")
    integrity = str(entry.get("integrity") or "")
    if library:
        return [], integrity
    package_dir = directory / "node_modules" / package
    manifest = json.loads((package_dir / "package.json").read_text())
    binaries = manifest.get("bin")
    if isinstance(binaries, str):
        script = binaries
    elif isinstance(binaries, dict) and binaries:
        short = package.rsplit("/", 1)[-1]
        script = binaries.get(short) or binaries.get(f"mcp-{short}") or next(iter(binaries.values()))
    else:
        raise InstallError(f'{package} {version} declares no program to run (no "bin" in its package.json)')
    return [node, str((package_dir / script).resolve())], integrity


# --- PyPI ---------------------------------------------------------------------------------------


def _install_pypi(directory: Path, package: str, version: str) -> tuple[list[str], str]:
    uv = _uv()
    env = {"UV_CACHE_DIR": str(cache_root() / "uv-cache"), "UV_NO_PROGRESS": "1"}
    venv = directory / "venv"
    _run([uv, "venv", "--quiet", "--python", packaged_python(), str(venv)], env=env, what="uv venv")
    python = venv / "bin" / "python"
    requirement = directory / "requirement.in"
    requirement.write_text(f"{package}=={version}\n")
    lock = directory / "requirements.lock"
    _run(
        [
            uv,
            "pip",
            "compile",
            "--quiet",
            "--generate-hashes",
            "--python",
            str(python),
            "-o",
            str(lock),
            str(requirement),
        ],
        env=env,
        what=f"resolving {package}=={version}",
    )
    _run(
        [uv, "pip", "install", "--quiet", "--require-hashes", "--python", str(python), "-r", str(lock)],
        env=env,
        what=f"installing {package}=={version}",
    )
    integrity = "sha256:" + hashlib.sha256(lock.read_bytes()).hexdigest()
    site = next(venv.glob("lib/python*/site-packages"), None)
    if site is None:
        raise InstallError("the virtualenv has no site-packages")
    wanted = re.sub(r"[-_.]+", "-", package).lower()
    for dist in metadata.distributions(path=[str(site)]):
        if re.sub(r"[-_.]+", "-", dist.metadata["Name"] or "").lower() != wanted:
            continue
        scripts = [ep for ep in dist.entry_points if ep.group == "console_scripts"]
        if not scripts:
            break
        chosen = next((ep for ep in scripts if ep.name == package), scripts[0])
        module, _, attr = chosen.value.partition(":")
        call = attr.split()[0] if attr else "main"
        head, _, rest = call.partition(".")
        attribute = f".{rest}" if rest else ""
        code = f"import sys; from {module} import {head} as _e; sys.exit(_e{attribute}())"
        return [str(python), "-c", code], integrity
    raise InstallError(f"{package} {version} declares no program to run (no console script)")


# --- versions -------------------------------------------------------------------------------------


def latest_version(kind: str, package: str) -> str:
    """The newest published version (what a pin without a version becomes); raises InstallError."""
    if kind == "npm":
        out = _run([_npm(), "view", "--json", package, "version"], what=f"npm view {package}")
        try:
            version = json.loads(out)
        except ValueError:
            version = None
        if not isinstance(version, str):
            raise InstallError(f"npm knows no version of {package}")
        return version
    return _compile_one(package, {"UV_CACHE_DIR": str(cache_root() / "uv-cache"), "UV_NO_PROGRESS": "1"})


def _compile_one(package: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [_uv(), "pip", "compile", "--quiet", "--no-header", "--no-annotate", "--python", packaged_python(), "-"],
        input=f"{package}\n",
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=INSTALL_TIMEOUT_SECONDS,
    )
    if done.returncode != 0:
        raise InstallError(f"resolving {package} failed: {done.stderr.strip()[-ERROR_CHARS:]}")
    wanted = re.sub(r"[-_.]+", "-", package).lower()
    for line in done.stdout.splitlines():
        name, sep, version = line.strip().partition("==")
        if sep and re.sub(r"[-_.]+", "-", name).lower() == wanted:
            return version.strip()
    raise InstallError(f"PyPI knows no version of {package}")
