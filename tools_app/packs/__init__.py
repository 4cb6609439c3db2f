"""Built-in tool packs. Importing a pack registers its handlers."""

from tools_app.packs import conformance, demo

PACKS = {"demo": demo.TOOLS, "conformance": conformance.TOOLS}
