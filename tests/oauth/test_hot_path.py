"""The credential check for OAuth tokens, in process: who a token makes the caller, what access
rules make of subjects and groups, and that a warm check asks the database nothing."""

from __future__ import annotations

import time
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth import get_user_model
from joserfc import jwt
from joserfc.jwk import KeySet

from audit.models import AuditEvent
from oauth.models import Grant, OAuthClient
from oauth.server.authorization import grant_revoke
from oauth.services import oauth_settings_set
from oauth.signing import signing_key
from tenants.auth import AuthFailure, tenant_directory
from tenants.principal import Principal
from tenants.services import membership_set
from tests.credentials import visible_names

ORIGIN = "http://testserver"


@pytest.fixture
def consent(acme: Any) -> Grant:
    oauth_settings_set(tenant=acme, changes={"enabled": True})
    user = get_user_model().objects.create_user("ada", password="pw")
    membership_set(tenant=acme, user=user, role="viewer")
    client = OAuthClient.objects.create(tenant=acme, client_id="cli", kind="preregistered", redirect_uris=[])
    return Grant.objects.create(tenant=acme, user=user, client=client, scope="tools:list tools:call")


def _token(grant: Grant, slug: str = "acme", **claims: Any) -> str:
    now = int(time.time())
    payload = {
        "iss": f"{ORIGIN}/oauth/{slug}",
        "aud": f"{ORIGIN}/mcp/{slug}",
        "sub": "ada",
        "client_id": "cli",
        "scope": "tools:list",
        "gid": grant.id,
        "groups": ["role:viewer", "staff"],
        "iat": now,
        "exp": now + 300,
        **claims,
    }
    key = signing_key(grant.tenant)
    return jwt.encode({"alg": "ES256", "kid": key.kid, "typ": "at+jwt"}, payload, KeySet([key]))


def _authenticate(token: str, slug: str = "acme") -> Principal:
    return async_to_sync(tenant_directory.authenticate)(slug, f"Bearer {token}", ORIGIN)


def test_a_token_becomes_a_principal_and_a_warm_check_queries_nothing(consent, django_assert_num_queries):
    token = _token(consent)
    principal = _authenticate(token)
    assert (principal.oauth_subject, principal.oauth_client, principal.grant_id) == ("ada", "cli", consent.id)
    assert principal.scopes == {"tools:list"} and principal.groups == {"role:viewer", "staff"}
    assert principal.subject.startswith(f"{consent.tenant_id}:oauth:") and principal.key_id is None
    refreshed = _token(consent, jti="another")  # a new token of the same subject (minting reads the key)
    with django_assert_num_queries(0):
        assert _authenticate(token) == principal
        assert _authenticate(refreshed).subject == principal.subject


def test_revoked_consent_and_other_tenants(consent, globex):
    token = _token(consent)
    _authenticate(token)
    grant_revoke(grant=consent)
    tenant_directory.clear()  # no commit in a test transaction: nothing moves the generation
    from oauth.resource.verifier import token_verifier

    token_verifier.clear()
    with pytest.raises(AuthFailure, match="revoked") as refused:
        _authenticate(token)
    assert refused.value.status == 401 and refused.value.challenge.error == "invalid_token"
    with pytest.raises(AuthFailure):
        _authenticate(token, "globex")


def test_rules_name_subjects_and_groups(acme, make_tool, grant):
    by_subject = make_tool("by_subject", tenant=acme)
    by_group = make_tool("by_group", tenant=acme)
    for_all = make_tool("for_all", tenant=acme)
    for tool, narrowing in ((by_subject, {"oauth_subjects": ["ada"]}), (by_group, {"oauth_groups": ["staff"]})):
        rule = grant(acme, tool, owner=acme)
        for name, value in narrowing.items():
            setattr(rule, name, value)
        rule.full_clean()
        rule.save()
    grant(acme, for_all, owner=acme)

    def principal(subject: str, groups: frozenset[str] = frozenset()) -> Principal:
        return Principal(acme.pk, "acme", None, "", "", frozenset(), oauth_subject=subject, groups=groups)

    assert visible_names(principal("ada")) == ["by_subject", "for_all"]
    assert visible_names(principal("bob", frozenset({"staff"}))) == ["by_group", "for_all"]
    assert visible_names(principal("bob")) == ["for_all"]
    assert visible_names(Principal(acme.pk, "acme", None, "anonymous", "", frozenset())) == ["for_all"]


def test_change_audit_records_the_subject_and_client_of_a_consent(consent):
    event = AuditEvent.objects.filter(object_type="oauth.Grant", object_id=consent.pk).get()
    assert (event.oauth_subject, event.oauth_client, event.action) == ("ada", "cli", "created")
