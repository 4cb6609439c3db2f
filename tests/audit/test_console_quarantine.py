"""Quarantined invocation rows are visible: in the console (scoped by tenant like every
other row) and as a metric."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from audit.models import QuarantinedInvocation

pytestmark = pytest.mark.django_db


@pytest.fixture
def quarantined(acme, globex):
    def make(tenant_id, error):
        return QuarantinedInvocation.objects.create(
            journal_id="1-0", tenant_id=tenant_id, payload=f'{{"tenant_id": {tenant_id}}}', error=error
        )

    return {
        "acme": make(acme.pk, "IntegrityError: acme row"),
        "globex": make(globex.pk, "DataError: globex row"),
        "unknown": QuarantinedInvocation.objects.create(journal_id="2-0", payload="not json", error="undecodable"),
    }


def test_an_operator_sees_the_quarantined_rows_of_their_tenants_only(operator_client, quarantined):
    page = operator_client.get("/console/quarantine/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "IntegrityError: acme row" in html and ">acme<" in html
    assert "globex row" not in html and "undecodable" not in html


def test_a_superuser_sees_every_quarantined_row(superuser_client, quarantined):
    html = superuser_client.get("/console/quarantine/").content.decode()
    assert all(text in html for text in ("acme row", "globex row", "undecodable"))


def test_no_quarantined_rows_says_so(operator_client, db):
    assert "every invocation row reached the database" in operator_client.get("/console/quarantine/").content.decode()


def test_the_metric_counts_every_quarantined_row(client, quarantined, settings):
    settings.METRICS_TOKEN = "scrape-token"  # DEBUG=0 serves /metrics only to a scrape that sends it
    text = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-token").content.decode()
    samples = {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "toolbay_audit_quarantined_rows"
    }
    assert samples == {"toolbay_audit_quarantined_rows": 3.0}
