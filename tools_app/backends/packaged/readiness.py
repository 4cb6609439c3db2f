"""What ``/readyz`` says about packaged servers: whether runners are up, which sandbox they
have, how they bound an instance's resources, and whether untrusted packages are refused (no
sandbox, no opt-out) or run unconfined (``TOOLBAY_SANDBOX_OPTOUT``). Informative: it never
makes a web process unready."""

from __future__ import annotations

from typing import Any

from tools_app.backends.packaged.locator import live_runners


async def packaged_readiness() -> dict[str, Any]:
    runners = await live_runners()
    sandboxes = sorted({str(r.get("sandbox") or "") for r in runners})
    if not runners:
        untrusted = "no runner is running"
    elif all(r.get("sandbox") for r in runners):
        untrusted = "sandboxed"
    elif all(r.get("sandbox") or r.get("optout") for r in runners):
        untrusted = "run without a sandbox (TOOLBAY_SANDBOX_OPTOUT)"
    else:
        untrusted = "refused (no sandbox on a runner, and no TOOLBAY_SANDBOX_OPTOUT)"
    return {
        "runners": len(runners),
        "sandbox": [s or "none" for s in sandboxes],
        "untrusted_packages": untrusted,
        "limits": sorted({str(r["limits"]) for r in runners if r.get("limits")}),
        "reasons": sorted({str(r.get("sandbox_reason") or "") for r in runners if not r.get("sandbox")}),
    }
