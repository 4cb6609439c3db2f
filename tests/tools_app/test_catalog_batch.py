"""``catalog_entries_create``: many tools in a few queries, with the same checks, audit rows and
change publish as creating them one by one."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from audit.models import AuditEvent
from mcp_platform.generations import GENERATION_KEY, tenant_field
from mcp_platform.redis_clients import sync_redis
from tenants.models import Tenant
from tools_app.catalog.models import Resource, Tool
from tools_app.catalog.services import catalog_entries_create, catalog_entry_create


def _row(name: str, **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "description": f"The {name} tool.",
        "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
        # An HTTP tool, as an import makes (a Python tool's check reads its tenant's handler catalog).
        "backend_kind": "http",
        "backend_config": {"method": "GET", "url": "https://api.example.test/items", "query": {"q": "{q}"}},
        **fields,
    }


@pytest.mark.django_db(transaction=True)
def test_a_batch_checks_each_tool_and_audits_and_publishes_like_one_by_one(acme: Tenant, globex: Tenant) -> None:
    catalog_entry_create(model=Tool, tenant=acme, fields=_row("taken"))
    catalog_entry_create(model=Tool, tenant=globex, fields=_row("mine_elsewhere"))
    before = sync_redis().hget(GENERATION_KEY, tenant_field("acme"))
    rows = [
        _row("one"),
        _row("taken"),  # in the catalog already
        _row("two", input_schema={"type": "object", "properties": {"q": {"type": "no-such-type"}}}),
        _row("one"),  # twice in the batch
        _row("bad name!"),
        _row("mine_elsewhere"),  # another tenant's name is free here
        *[_row(f"many_{index}") for index in range(40)],
    ]
    with CaptureQueriesContext(connection) as queries:
        batch = catalog_entries_create(model=Tool, tenant=acme, rows=rows)
    # Names read once, one INSERT for the tools, one for their audit rows (whatever the count).
    assert len(queries) <= 6, "\n".join(query["sql"][:150] for query in queries)

    assert [tool.name for tool in batch.created] == ["one", "mine_elsewhere", *[f"many_{i}" for i in range(40)]]
    refused = {index: error.message_dict for index, error in batch.refused}
    assert set(refused) == {1, 2, 3, 4}
    assert "already exists in tenant" in refused[1]["name"][0]
    assert "input_schema" in refused[2]
    assert "already exists in tenant" in refused[3]["name"][0]
    assert "name" in refused[4]
    assert Tool.objects.filter(tenant=acme).count() == 43

    # The same audit row a single create writes: every field, created, attributed, the tenant's.
    single = AuditEvent.objects.get(object_type="tools_app.Tool", object_repr__startswith="taken")
    event = AuditEvent.objects.get(object_type="tools_app.Tool", object_id=str(batch.created[0].pk))
    assert event.action == "created" and event.tenant_slug == "acme" and event.tenant_id == acme.pk
    assert set(event.changes) == set(single.changes)
    assert event.changes["name"] == [None, "one"] and event.changes["version"] == [None, 1]
    assert AuditEvent.objects.filter(object_type="tools_app.Tool", tenant_id=acme.pk).count() == 43
    # One publish after commit: the tenant's generation moved, so cached views are stale.
    assert sync_redis().hget(GENERATION_KEY, tenant_field("acme")) != before


@pytest.mark.django_db
def test_a_kind_that_computes_fields_when_saved_is_refused(acme: Tenant) -> None:
    with pytest.raises(TypeError, match="one by one"):
        catalog_entries_create(model=Resource, tenant=acme, rows=[])
