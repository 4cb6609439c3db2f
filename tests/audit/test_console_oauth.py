"""The console filters the invocation log and the change audit by OAuth subject and client."""

from __future__ import annotations

import re

from audit.models import AuditEvent


def _ids(response) -> list[int]:
    return [int(match) for match in re.findall(r'href="/console/invocations/(\d+)/', response.content.decode())]


def test_invocations_by_oauth_subject_and_client(operator_client, acme, make_invocation):
    ada = make_invocation(acme, oauth_subject="ada", oauth_client="ide", key_label="oauth ada via ide")
    bob = make_invocation(acme, oauth_subject="bob", oauth_client="cli", key_label="oauth bob via cli")
    keyed = make_invocation(acme)
    assert set(_ids(operator_client.get("/console/invocations/"))) == {ada.pk, bob.pk, keyed.pk}
    assert _ids(operator_client.get("/console/invocations/", {"oauth_subject": "ada"})) == [ada.pk]
    assert _ids(operator_client.get("/console/invocations/", {"oauth_client": "cli"})) == [bob.pk]
    detail = operator_client.get(f"/console/invocations/{ada.pk}/").content.decode()
    assert "OAuth subject" in detail and "oauth_subject=ada" in detail


def test_changes_by_oauth_subject(operator_client, acme):
    AuditEvent.objects.create(
        tenant=acme, tenant_slug="acme", action="created", object_type="oauth.Grant", object_id="g1",
        object_repr="ide for ada", oauth_subject="ada", oauth_client="ide", source="oauth",
    )  # fmt: skip
    AuditEvent.objects.create(
        tenant=acme, tenant_slug="acme", action="created", object_type="oauth.Grant", object_id="g2",
        object_repr="cli for bob", oauth_subject="bob", oauth_client="cli", source="oauth",
    )  # fmt: skip
    page = operator_client.get("/console/changes/", {"oauth_subject": "ada"}).content.decode()
    assert "ide for ada" in page and "cli for bob" not in page
