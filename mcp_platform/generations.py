"""Per-tenant generation counters in Redis: how every process's caches stay correct.

Whatever changes what a tenant's callers may see or use (its settings, keys, tools, access
rules) bumps the tenant's generation after the transaction commits
(``tools_app.catalog.changes``). A cache compares the generation it loaded at with the
current one on every request, one Redis round trip, instead of trusting a broadcast: an
invalidation cannot be lost the way a missed message could.

One hash, one field per tenant slug (so a cache can read it before it knows anything else
about the tenant), and field ``all`` for changes that concern every tenant.
"""

from __future__ import annotations

from collections.abc import Iterable

from mcp_platform.redis_clients import command_batch, sync_redis

GENERATION_KEY = "toolbay:catalog:gen"
ALL_TENANTS = "all"

# (the "all" generation, the tenant's own)
Generation = tuple[int, int]


def tenant_field(slug: str) -> str:
    return f"t:{slug}"


async def read(slug: str) -> Generation:
    every, own = await command_batch().one("HMGET", GENERATION_KEY, ALL_TENANTS, tenant_field(slug))
    return (int(every or 0), int(own or 0))


def bump(slugs: Iterable[str], *, every_tenant: bool = False) -> None:
    """Move the generations of these tenants (and of all, with ``every_tenant``) on."""
    fields = [ALL_TENANTS] if every_tenant else []
    fields.extend(tenant_field(slug) for slug in slugs)
    if not fields:
        return
    pipe = sync_redis().pipeline(transaction=False)
    for name in fields:
        pipe.hincrby(GENERATION_KEY, name, 1)
    pipe.execute()
