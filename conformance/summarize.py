"""Lists what failed in a conformance run, from the checks.json files the suite wrote.

    python conformance/summarize.py conformance-results conformance/baseline.yml

A scenario fails on a FAILURE or a WARNING check (the rule --expected-failures applies).
Each failing scenario is printed with its failing checks (errorMessage and details),
unless conformance/baseline.yml lists it (then only its name is printed); baselined
scenarios that passed are printed as "stale". Standard library only.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

FAILING = ("FAILURE", "WARNING")
# <dir>/server-<scenario>-<ISO timestamp with : and . replaced by ->/checks.json
RUN_DIR = re.compile(r"^server-(?P<scenario>.+?)-\d{4}-\d{2}-\d{2}T[\d-]+Z?$")


def baseline_scenarios(path: Path) -> set[str]:
    """The `server:` list of the baseline (a flat YAML list; no YAML library needed)."""
    scenarios: set[str] = set()
    section = None
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].rstrip()
        if not line:
            continue
        if not line.startswith((" ", "-")):
            section = line.rstrip(":").strip()
        elif section == "server" and line.strip().startswith("- "):
            scenarios.add(line.strip()[2:].strip().strip("'\""))
    return scenarios


def scenario_checks(results: Path) -> dict[str, list[dict[str, object]]]:
    found: dict[str, list[dict[str, object]]] = {}
    for checks_file in sorted(results.glob("*/checks.json")):
        match = RUN_DIR.match(checks_file.parent.name)
        scenario = match["scenario"] if match else checks_file.parent.name
        found[scenario] = json.loads(checks_file.read_text())
    return found


def main(results_dir: str, baseline_file: str) -> int:
    results, baseline = Path(results_dir), baseline_scenarios(Path(baseline_file))
    runs = scenario_checks(results)
    if not runs:
        print(f"No checks.json under {results}/.")
        return 1
    new_failures, expected = 0, []
    print(f"\nConformance summary ({len(runs)} scenarios):")
    for scenario, checks in sorted(runs.items()):
        failing = [check for check in checks if check.get("status") in FAILING]
        if not failing:
            if scenario in baseline:
                print(f"  stale: {scenario} passes now; delete it from {baseline_file}")
            continue
        if scenario in baseline:
            expected.append(scenario)
            continue
        new_failures += 1
        print(f"  NEW FAILURE: {scenario}")
        for check in failing:
            message = check.get("errorMessage") or check.get("description")
            print(f"      {check.get('status')} {check.get('id')}: {message}")
            if check.get("details") is not None:
                details = json.dumps(check["details"], ensure_ascii=False)
                print(f"          details: {details[:1500]}{'...' if len(details) > 1500 else ''}")
    if expected:
        print(f"  expected to fail (baseline): {', '.join(expected)}")
    passed = sum(1 for checks in runs.values() if not any(c.get("status") in FAILING for c in checks))
    print(f"  {passed} passed, {len(runs) - passed} failing ({new_failures} not in the baseline)\n")
    return 1 if new_failures else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(64)
    sys.exit(main(sys.argv[1], sys.argv[2]))
