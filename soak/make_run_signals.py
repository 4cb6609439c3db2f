"""Soak: `make run` stopped every way an operator or a supervisor stops it leaves no process.

    python soak/make_run_signals.py

Runs tests/test_make_run.py with every way of stopping it (SIGTERM to its process group,
to make alone, SIGINT once and twice, SIGKILL to make and the script), each on its own
ports, private redis-server and SQLite file, and fails when any process of the run is left.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    env = {**os.environ, "TOOLBAY_SOAK_MAKE_RUN": "1"}
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-o",
        "timeout=0",
        "tests/test_make_run.py",
    ]
    return subprocess.run(command, cwd=ROOT, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
