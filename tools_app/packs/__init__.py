"""Built-in packs of tools, resources and prompts. Importing a pack registers its handlers."""

from tools_app.packs import conformance, demo

PACKS = {"demo": demo.PACK, "conformance": conformance.PACK}
