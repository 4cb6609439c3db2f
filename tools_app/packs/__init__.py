"""Built-in tool packs. Importing a pack registers its handlers."""

from tools_app.packs import conformance, conformance_stateless, conformance_tasks, demo

PACKS = {
    "demo": demo.TOOLS,
    "conformance": [*conformance.TOOLS, *conformance_stateless.TOOLS, *conformance_tasks.TOOLS],
}
