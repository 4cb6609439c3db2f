"""Built-in packs of tools, resources and prompts. Importing a pack registers its handlers."""

import dataclasses

from tools_app.packs import conformance, conformance_stateless, conformance_tasks, demo

PACKS = {
    "demo": demo.PACK,
    # The 2026-07-28 scenarios' fixtures join the 2025-11-25 suite's on the same endpoint.
    "conformance": dataclasses.replace(
        conformance.PACK,
        tools=[*conformance.PACK.tools, *conformance_stateless.TOOLS, *conformance_tasks.TOOLS],
        prompts=[*conformance.PACK.prompts, *conformance_stateless.PROMPTS],
    ),
}
