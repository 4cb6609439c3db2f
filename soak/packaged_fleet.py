"""Soak: 50 tenants each with an instance of the same packaged MCP server on this machine.

    python soak/packaged_fleet.py [--tenants 50]

Runs tests/backends/test_packaged_fleet.py with ``TOOLBAY_PACKAGED_FLEET`` set and prints its
figures: memory per instance, cold start and warm call latency, and how idle instances are
reclaimed. Database and Redis as for the tests.
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
    parser.add_argument("--tenants", type=int, default=50)
    args = parser.parse_args()
    env = {**os.environ, "TOOLBAY_PACKAGED_FLEET": str(args.tenants)}
    test = "tests/backends/test_packaged_fleet.py"
    command = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-o", "timeout=0", test]
    return subprocess.run(command, cwd=ROOT, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
