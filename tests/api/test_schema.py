"""The OpenAPI schema at /api/schema/ and the docs page, which must work offline."""

from __future__ import annotations

import re

import pytest
from django.contrib.staticfiles import finders
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db


def test_schema_describes_the_api() -> None:
    response = APIClient().get("/api/schema/", {"format": "json"})
    assert response.status_code == 200
    schema = response.json()
    assert schema["openapi"].startswith("3.")
    assert {
        "/api/v1/tenants/",
        "/api/v1/memberships/{id}/",
        "/api/v1/api-keys/{id}/revoke/",
        "/api/v1/tools/validate/",
        "/api/v1/tools/{id}/test-call/",
        "/api/v1/access-rules/",
        "/api/v1/tokens/",
        "/api/v1/me/",
    } <= set(schema["paths"])
    schemes = schema["components"]["securitySchemes"]
    assert schemes["accessToken"] == {
        "type": "http",
        "scheme": "bearer",
        "description": schemes["accessToken"]["description"],
    }
    assert "cookieAuth" in schemes
    create_key = schema["paths"]["/api/v1/api-keys/"]["post"]
    assert create_key["responses"]["201"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ApiKeyCreated"
    }
    assert set(create_key["responses"]) >= {"400", "401", "403", "404"}


def test_docs_page_loads_nothing_from_elsewhere() -> None:
    response = APIClient().get("/api/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    assets = re.findall(r"""(?:src|href)=["']([^"']+)["']""", html)
    assert any(a.endswith("swagger-ui-bundle.js") for a in assets)
    assert assets and all(a.startswith("/") and not a.startswith("//") for a in assets), assets
    assert "https://" not in html and "http://" not in html
    for asset in assets:
        if asset.startswith("/static/"):
            assert finders.find(asset.removeprefix("/static/")), f"{asset} is not a local static file"
