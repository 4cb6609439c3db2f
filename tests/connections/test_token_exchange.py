"""RFC 8693 token exchange against the real oidc-provider (its registered token-exchange
grant): the caller's own token at the IdP becomes a token for another audience, still theirs."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest
import redis
from asgiref.sync import async_to_sync
from django.conf import settings

from oauth.connections import client
from oauth.connections.broker import broker
from oauth.connections.selectors import provider_named, provider_secret
from oauth.models import ConnectionProvider
from oauth.sealing import unseal
from tenants.models import Tenant
from tests.connections.conftest import EXCHANGE_AUDIENCE, PROVIDER, TENANT, ConnWorld
from tests.connections.test_connect_flow import _connect, _connection, _introspect
from tools_app.backends.base import BackendError
from tools_app.backends.connections import Caller, Token


@pytest.fixture
def idp_provider(conn_world: ConnWorld, orm: None, settings: Any) -> tuple[ConnectionProvider, str]:
    # This process talks to the IdP directly (the servers' guard allows loopback the same way).
    settings.TOOLBAY_OUTBOUND_ALLOWED_HOSTS = ["127.0.0.1"]
    tenant_id = Tenant.objects.get(slug=TENANT).pk
    provider = provider_named(tenant_id, PROVIDER)
    assert provider is not None
    return provider, provider_secret(provider)


def _users_idp_token(world: ConnWorld, person: str) -> str:
    connection = _connection(person) or _connect(world, person)
    return unseal(connection.access_token_sealed)


def _exchange(provider: ConnectionProvider, secret: str, subject_token: str, audience: str) -> dict[str, Any]:
    return asyncio.run(
        client.exchange_token(provider, secret, subject_token=subject_token, audience=audience, scopes=["openid"])
    )


def test_each_users_token_is_exchanged_for_their_own_token_at_the_audience(
    conn_world: ConnWorld, idp_provider: tuple[ConnectionProvider, str]
) -> None:
    provider, secret = idp_provider
    for person in ("alice", "bob"):
        subject_token = _users_idp_token(conn_world, person)
        issued = _exchange(provider, secret, subject_token, EXCHANGE_AUDIENCE)
        assert issued["issued_token_type"] == client.ACCESS_TOKEN_TYPE
        assert issued["access_token"] != subject_token
        seen = _introspect(conn_world, issued["access_token"])
        assert seen["active"] is True
        assert seen["sub"] == person
        assert seen["aud"] == EXCHANGE_AUDIENCE


def test_a_forged_subject_token_or_a_foreign_audience_is_refused(
    conn_world: ConnWorld, idp_provider: tuple[ConnectionProvider, str]
) -> None:
    provider, secret = idp_provider
    with pytest.raises(client.ProviderError) as forged:
        _exchange(provider, secret, "not-a-token-of-this-idp", EXCHANGE_AUDIENCE)
    assert forged.value.error == "invalid_grant"
    subject_token = _users_idp_token(conn_world, "alice")
    with pytest.raises(client.ProviderError) as foreign:
        _exchange(provider, secret, subject_token, "https://elsewhere.example/")
    assert foreign.value.error == "invalid_target"
    assert subject_token not in str(foreign.value)
    with pytest.raises(client.ProviderError) as wrong_secret:
        _exchange(provider, "wrong-secret", subject_token, EXCHANGE_AUDIENCE)
    assert wrong_secret.value.error == "invalid_client"


def test_the_broker_exchanges_the_callers_own_token_at_its_issuer_and_caches_it_sealed(
    conn_world: ConnWorld, idp_provider: tuple[ConnectionProvider, str]
) -> None:
    provider, _secret = idp_provider
    subject_token = _users_idp_token(conn_world, "alice")
    caller = Caller(
        tenant_id=provider.tenant_id or 0,
        subject="oauth:alice",
        oauth_subject="alice",
        oauth_issuer=conn_world.idp.issuer,
        bearer=subject_token,
    )
    assert subject_token not in repr(caller)

    async def twice() -> tuple[Token, Token]:
        first = await broker.exchanged_token(caller, PROVIDER, EXCHANGE_AUDIENCE, ["openid"])
        return first, await broker.exchanged_token(caller, PROVIDER, EXCHANGE_AUDIENCE, ["openid"])

    first, second = async_to_sync(twice)()  # the ORM stays on this thread
    assert first.value == second.value  # the second came from the cache
    assert _introspect(conn_world, first.value)["sub"] == "alice"
    cached = redis.Redis.from_url(settings.REDIS_URL).keys("toolbay:token-exchange:*")
    assert cached
    stored = b"".join(redis.Redis.from_url(settings.REDIS_URL).get(key) or b"" for key in cached)
    assert first.value.encode() not in stored  # sealed

    # The caller's token goes to its own issuer only; without one there is nothing to exchange.
    elsewhere = replace(caller, oauth_issuer="https://other-idp.example")
    with pytest.raises(BackendError, match="not issued by the provider"):
        async_to_sync(broker.exchanged_token)(elsewhere, PROVIDER, EXCHANGE_AUDIENCE, [])
    with pytest.raises(BackendError, match="caller's own OAuth token"):
        async_to_sync(broker.exchanged_token)(replace(caller, bearer=""), PROVIDER, EXCHANGE_AUDIENCE, [])
