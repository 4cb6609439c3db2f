"""TOOLBAY_SSO_ROLE_MAP: checked at start-up; several groups give the highest role per tenant."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from staff_auth.roles import entitlements_for, parse_role_map


@pytest.mark.parametrize(
    "raw",
    [["acme:admin"], {"ops": "acme:superhero"}, {"ops": ":admin"}, {"ops": "acme"}, {"ops": [1]}, {"ops": "root"}],
)
def test_a_bad_map_is_refused_naming_the_entry(raw: object) -> None:
    with pytest.raises(ImproperlyConfigured, match="TOOLBAY_SSO_ROLE_MAP"):
        parse_role_map(raw)


def test_the_highest_role_per_tenant_wins() -> None:
    role_map = parse_role_map(
        {"ops": "acme:operator", "leads": ["acme:admin", "beta:viewer"], "root": "platform-admin"}
    )
    wanted = entitlements_for(["ops", "leads", "unknown"], role_map)
    assert not wanted.platform_admin
    assert dict(wanted.tenant_roles) == {"acme": "admin", "beta": "viewer"}
    assert entitlements_for(["root"], role_map).platform_admin
