"""Lists what failed in a conformance run, from the checks.json files the suite wrote.

    python conformance/summarize.py conformance-results

A scenario fails on a FAILURE or a WARNING check (the rule the suite's --expected-failures
applies; without a baseline the suite itself only fails on FAILURE, so this is what keeps
warnings from passing unnoticed). Each failing scenario is printed with its failing checks
(errorMessage and details); the exit status is 1 when any scenario failed. There is no
baseline: every scenario of the suite is expected to pass. Standard library only.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

FAILING = ("FAILURE", "WARNING")
# <dir>/server-<scenario>-<ISO timestamp with : and . replaced by ->/checks.json
RUN_DIR = re.compile(r"^server-(?P<scenario>.+?)-\d{4}-\d{2}-\d{2}T[\d-]+Z?$")


def scenario_checks(results: Path) -> dict[str, list[dict[str, object]]]:
    found: dict[str, list[dict[str, object]]] = {}
    for checks_file in sorted(results.glob("*/checks.json")):
        match = RUN_DIR.match(checks_file.parent.name)
        scenario = match["scenario"] if match else checks_file.parent.name
        found[scenario] = json.loads(checks_file.read_text())
    return found


def main(results_dir: str) -> int:
    results = Path(results_dir)
    runs = scenario_checks(results)
    if not runs:
        print(f"No checks.json under {results}/.")
        return 1
    failures = 0
    print(f"\nConformance summary ({len(runs)} scenarios):")
    for scenario, checks in sorted(runs.items()):
        failing = [check for check in checks if check.get("status") in FAILING]
        if not failing:
            continue
        failures += 1
        print(f"  FAILURE: {scenario}")
        for check in failing:
            message = check.get("errorMessage") or check.get("description")
            print(f"      {check.get('status')} {check.get('id')}: {message}")
            if check.get("details") is not None:
                details = json.dumps(check["details"], ensure_ascii=False)
                print(f"          details: {details[:1500]}{'...' if len(details) > 1500 else ''}")
    print(f"  {len(runs) - failures} passed, {failures} failed\n")
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(64)
    sys.exit(main(sys.argv[1]))
