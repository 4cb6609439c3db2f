"""Soak: rolling restarts of two servers under load, round after round.

    python soak/rolling_restart.py [--rounds 5] [--clients 8]

Runs tests/mcp/test_rolling_restart.py at a larger scale (each round stops both servers
with SIGTERM and starts them again, one after the other, while SDK clients call inline,
streaming and background tools through a failover proxy) and prints its figures: calls
answered, client-visible errors (must be 0), requests the proxy sent again (a stopping
server had not taken them) and invocation rows against answered calls (none lost).
Database and Redis: TOOLBAY_TEST_DATABASE_URL / TOOLBAY_TEST_REDIS_URL, as for the tests
(`make soak` gives it its own).
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
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--clients", type=int, default=8)
    args = parser.parse_args()
    env = {**os.environ, "TOOLBAY_SOAK_ROUNDS": str(args.rounds), "TOOLBAY_SOAK_CLIENTS": str(args.clients)}
    test = "tests/mcp/test_rolling_restart.py"
    command = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-o", "timeout=0", test]
    return subprocess.run(command, cwd=ROOT, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
