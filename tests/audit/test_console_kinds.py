"""Resource reads and prompt gets in the console and the API's invocation log: a kind column,
a kind filter, the URI or prompt as the target, in exports too; scoped like tool calls."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.django_db


def _ids(response) -> list[int]:
    return [int(pk) for pk in re.findall(r'href="/console/invocations/(\d+)/"', response.content.decode())]


@pytest.fixture
def kinds(acme, globex, make_invocation):
    return {
        "call": make_invocation(acme, "echo"),
        "read": make_invocation(acme, "docs://handbook/intro", kind="resource"),
        "denied_read": make_invocation(
            acme, "docs://secret", "denied", kind="resource", error_message="Unknown or forbidden resource"
        ),
        "prompt": make_invocation(acme, "explain", kind="prompt", arguments={"topic": "tides"}),
        "foreign": make_invocation(globex, "docs://handbook/intro", kind="resource"),
    }


def test_the_list_shows_and_filters_the_kind(operator_client, kinds):
    page = operator_client.get("/console/invocations/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "<th>Kind</th>" in html and "docs://handbook/intro" in html
    assert set(_ids(page)) == {kinds[k].pk for k in ("call", "read", "denied_read", "prompt")}
    reads = operator_client.get("/console/invocations/?kind=resource")
    assert set(_ids(reads)) == {kinds["denied_read"].pk, kinds["read"].pk}
    assert _ids(operator_client.get("/console/invocations/?kind=prompt")) == [kinds["prompt"].pk]
    by_uri = operator_client.get("/console/invocations/?tool=docs://handbook/intro")
    assert _ids(by_uri) == [kinds["read"].pk]  # not globex's read of the same URI
    assert _ids(operator_client.get("/console/invocations/?q=handbook")) == [kinds["read"].pk]
    assert operator_client.get("/console/invocations/?kind=nonsense").status_code == 400


def test_details_and_exports_name_the_kind(operator_client, kinds):
    detail = operator_client.get(f"/console/invocations/{kinds['read'].pk}/").content.decode()
    assert "Resource read" in detail and "<dt>URI</dt>" in detail
    prompt = operator_client.get(f"/console/invocations/{kinds['prompt'].pk}/").content.decode()
    assert "<dt>Prompt</dt>" in prompt and "tides" in prompt
    assert operator_client.get(f"/console/invocations/{kinds['foreign'].pk}/").status_code == 404
    csv = b"".join(operator_client.get("/console/invocations/export.csv?kind=prompt").streaming_content).decode()
    header, *lines = csv.strip().splitlines()
    assert "kind" in header.split(",") and len(lines) == 1 and ",prompt," in lines[0]


def test_the_api_lists_and_filters_kinds(client_for_operator, kinds):
    rows = client_for_operator.get("/api/v1/invocations/?kind=resource").json()["results"]
    assert {(row["kind"], row["tool_name"]) for row in rows} == {
        ("resource", "docs://handbook/intro"),
        ("resource", "docs://secret"),
    }
    assert client_for_operator.get("/api/v1/invocations/?kind=bogus").status_code == 400


@pytest.fixture
def client_for_operator(acme_operator):
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_login(acme_operator)
    return client
