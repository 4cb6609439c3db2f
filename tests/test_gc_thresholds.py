"""Server processes run the garbage collector on TOOLBAY_GC_THRESHOLDS, with what they
loaded to start frozen; a value that is not three positive integers stops the start."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROBE = "import gc, mcp_platform.asgi; print(gc.get_threshold(), gc.get_freeze_count() > 0)"


def _start(thresholds: str | None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "mcp_platform.settings"}
    env.pop("TOOLBAY_GC_THRESHOLDS", None)
    if thresholds is not None:
        env["TOOLBAY_GC_THRESHOLDS"] = thresholds
    return subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("setting", "expected"), [(None, "(50000, 50, 100)"), ("20000,20,40", "(20000, 20, 40)")])
def test_the_asgi_process_collects_on_the_configured_thresholds(setting: str | None, expected: str) -> None:
    started = _start(setting)
    assert started.returncode == 0, started.stderr
    assert started.stdout.split("\n")[-2] == f"{expected} True"


@pytest.mark.parametrize("setting", ["700,10", "0,10,10", "a,b,c"])
def test_a_bad_value_stops_the_start_naming_the_setting(setting: str) -> None:
    started = _start(setting)
    assert started.returncode != 0
    assert "TOOLBAY_GC_THRESHOLDS must be 3 comma-separated integers >= 1" in started.stderr
