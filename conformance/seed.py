"""``python -m conformance.seed``: the ``conformance`` tenant, anonymous as the suite expects,
with the fixtures of ``conformance.handlers`` installed and granted to it (idempotent).

For ``make conformance`` and the tests only: the tenant answers anyone without a credential,
which no production deployment should have. The server and workers must load the fixtures'
handlers too (``TOOLBAY_HANDLER_MODULES=conformance.handlers``).
"""

from __future__ import annotations

import os
import sys

SLUG = "conformance"


def seed_conformance() -> None:
    """Create (or keep) the tenant and install the fixtures; needs Django set up."""
    from conformance.handlers import PACK
    from mcp_platform.actors import Actor, acting_as
    from tenants.models import Tenant
    from tenants.services import tenant_create
    from tools_app.packs.install import pack_install

    with acting_as(Actor(source="command", label="python -m conformance.seed")):
        tenant = Tenant.objects.filter(slug=SLUG).first() or tenant_create(
            slug=SLUG, name="MCP conformance suite", allow_anonymous=True
        )
        pack_install(pack=PACK, tag=SLUG, tenant=tenant, note="conformance.seed: the conformance suite's fixtures")


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mcp_platform.settings")
    import django

    django.setup()
    from django.conf import settings

    if "conformance.handlers" not in settings.TOOLBAY_HANDLER_MODULES:
        sys.exit("Set TOOLBAY_HANDLER_MODULES=conformance.handlers here and for the server and its workers.")
    seed_conformance()
    print(f"Conformance fixtures installed: tenant '{SLUG}' (anonymous).")


if __name__ == "__main__":
    main()
