"""The MCP conformance suite's side of Toolbay: the scripts that run it (run.sh, auth.sh) and
the fixtures its scenarios call (``conformance.handlers``, seeded by ``conformance.seed``).

Nothing here is part of the product: a deployment loads the fixtures only when
``TOOLBAY_HANDLER_MODULES`` names ``conformance.handlers`` (``make conformance`` and the
tests do).
"""
