"""Soak: servers and workers killed mid-call, again and again; every call still ends.

    python soak/call_ends.py [--kills 10]

Runs tests/mcp/test_call_ends.py with each worker kill repeated ``--kills`` times and
prints the figures: how long after a server's SIGKILL a resumed inline call ended, and
how long after a worker's SIGKILL (main process and pool child) each call was failed (not
idempotent) or running again on another worker (idempotent). Every call must end: a call
left without an end fails the run. Database and Redis as for the tests.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=10)
    args = parser.parse_args()
    env = {**os.environ, "TOOLBAY_SOAK_KILLS": str(args.kills)}
    test = "tests/mcp/test_call_ends.py"
    command = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-o", "timeout=0", test]
    return subprocess.run(command, cwd=ROOT, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
