"""Reading the REST API's paginated list responses."""

from __future__ import annotations

from typing import Any


def ids(response: Any) -> list[Any]:
    """The ids (or slugs, for tenants) in a list response, in order."""
    assert response.status_code == 200, response.content
    return [row.get("id") for row in response.json()["results"]]
