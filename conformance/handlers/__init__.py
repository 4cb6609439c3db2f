"""The conformance suite's fixtures: importing this package registers their handlers
(``TOOLBAY_HANDLER_MODULES=conformance.handlers``), and ``PACK`` is what
``python -m conformance.seed`` installs for the ``conformance`` tenant.

The 2026-07-28 scenarios' fixtures join the 2025-11-25 suite's on the same endpoint.
"""

import dataclasses

from conformance.handlers import fixtures, stateless, tasks

PACK = dataclasses.replace(
    fixtures.PACK,
    tools=[*fixtures.PACK.tools, *stateless.TOOLS, *tasks.TOOLS],
    prompts=[*fixtures.PACK.prompts, *stateless.PROMPTS],
)
