"""Built-in packs of tools, resources and prompts. Importing a pack registers its handlers.

The product ships one pack, ``demo`` (installed by ``seed_demo``); the conformance suite's
fixtures live outside the product, in ``conformance.handlers``.
"""

from tools_app.packs import demo

__all__ = ["demo"]
