"""The OpenAPI import over a seeded sample of 200 documents of APIs.guru's directory (about six
minutes here): the share of operations that become tools with valid 2020-12 schemas (at least
98%), and a message naming the place for every document refused. `make test` runs 20 of them;
this is the full sample, printed as the test's figures."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

if __name__ == "__main__":
    command = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-m", "openapi_corpus"]
    command.append("tests/tools_app/test_openapi_corpus.py")
    env = {**os.environ, "TOOLBAY_OPENAPI_CORPUS_FULL": "1"}
    sys.exit(subprocess.call(command, cwd=ROOT, env=env))
