"""The connection broker the backends ask for a caller's token (installed into
``tools_app.backends.connections`` when the oauth app starts).

A token close to its expiry is refreshed first, by one process at a time: the refresh holds
a Redis lock per connection, and whoever waited for it reads the row again (the refresh
token may have been rotated by then, and using the old one twice would end the grant at
providers that detect refresh-token reuse). A refresh the provider refuses forgets the
connection (audited), so that the next call asks the user to connect again.
"""

from __future__ import annotations

import hashlib
import logging
from datetime import timedelta

from asgiref.sync import sync_to_async
from django.conf import settings
from django.utils import timezone

from mcp_platform.redis_clients import async_redis
from oauth.connections import client, services
from oauth.connections.selectors import provider_named, provider_secret, providers_matching
from oauth.models import Connection, ConnectionProvider, Grant
from oauth.sealing import seal, unseal
from tenants.models import ApiKey, Tenant
from tools_app.backends.base import BackendError
from tools_app.backends.connections import Caller, ConnectionRequired, ProviderMissing, Token
from tools_app.backends.single_flight import one_at_a_time

log = logging.getLogger(__name__)

# An exchanged token is not used from the cache in its last seconds.
EXCHANGE_CACHE_MARGIN_SECONDS = 30


def owner_user_id(caller: Caller) -> int | None:
    """The Toolbay user a principal belongs to: an API key's creator, or the user who
    consented to the embedded server's token. External identities have none here."""
    if caller.key_id is not None:
        return (
            ApiKey.objects.filter(pk=caller.key_id, tenant_id=caller.tenant_id)
            .values_list("created_by_id", flat=True)
            .first()
        )
    if caller.grant_id:
        return (
            Grant.objects.filter(pk=caller.grant_id, tenant_id=caller.tenant_id)
            .values_list("user_id", flat=True)
            .first()
        )
    return None


def _connect_url(attempt_id: str, provider: ConnectionProvider, tenant_slug: str) -> str:
    base = services.public_base().rstrip("/")
    return f"{base}/connect/{tenant_slug}/{provider.name}/start/{attempt_id}"


def _needed(
    caller: Caller, provider: ConnectionProvider, scopes: list[str], session_id: str = ""
) -> ConnectionRequired:
    wanted = list(dict.fromkeys([*provider.scopes, *scopes]))
    attempt = services.attempt_create(
        caller=caller, provider=provider, scopes=wanted, user_id=owner_user_id(caller), session_id=session_id
    )
    slug = Tenant.objects.filter(pk=caller.tenant_id).values_list("slug", flat=True).first() or ""
    return ConnectionRequired(
        provider.name, provider.display_name or provider.name, _connect_url(attempt.pk, provider, slug), attempt.pk
    )


def _missing(caller: Caller, provider: str) -> ProviderMissing:
    slug = Tenant.objects.filter(pk=caller.tenant_id).values_list("slug", flat=True).first() or ""
    return ProviderMissing(provider, slug)


def _usable(connection: Connection) -> bool:
    if connection.expires_at is None:
        return True
    margin = timedelta(seconds=settings.TOOLBAY_CONNECTION_REFRESH_MARGIN_SECONDS)
    return connection.expires_at - margin > timezone.now()


def _load(provider: ConnectionProvider, subject: str) -> Connection | None:
    return Connection.objects.select_related("provider").filter(provider=provider, subject=subject).first()


class Broker:
    async def access_token(
        self, caller: Caller, provider: str, scopes: list[str], *, call_id: str = "", session_id: str = ""
    ) -> Token:
        found = await sync_to_async(provider_named)(caller.tenant_id, provider)
        if found is None:
            raise await sync_to_async(_missing)(caller, provider)
        connection = await sync_to_async(_load)(found, caller.subject)
        if connection is None or not set(scopes) <= set(connection.scopes):
            raise await sync_to_async(_needed)(caller, found, scopes, session_id)
        if not _usable(connection):
            connection = await self._refresh(found, connection)
            if connection is None:
                raise await sync_to_async(_needed)(caller, found, scopes, session_id)
        await Connection.objects.filter(pk=connection.pk).aupdate(last_used_at=timezone.now())
        value = unseal(connection.access_token_sealed, name=f"connection to {provider}")
        return Token(value, f"{found.name}#{connection.pk} {connection.account}".strip())

    async def token_rejected(self, caller: Caller, provider: str) -> None:
        """The API refused the token: refresh it, or forget the connection when that fails."""
        found = await sync_to_async(provider_named)(caller.tenant_id, provider)
        if found is None:
            return
        connection = await sync_to_async(_load)(found, caller.subject)
        if connection is not None:
            await self._refresh(found, connection, force=True)

    async def is_connected(self, caller: Caller, provider: str) -> bool:
        found = await sync_to_async(provider_named)(caller.tenant_id, provider)
        if found is None:
            return False
        return await Connection.objects.filter(provider=found, subject=caller.subject).aexists()

    def provider_exists(self, tenant_id: int | None, provider: str) -> bool:
        return provider_named(tenant_id, provider) is not None

    def providers_matching(self, tenant_id: int | None, urls: dict[str, str]) -> list[str]:
        return providers_matching(tenant_id, urls)

    async def _refresh(
        self, provider: ConnectionProvider, connection: Connection, *, force: bool = False
    ) -> Connection | None:
        seen = connection.access_token_sealed
        busy = "the connection's token is being refreshed; try again"
        async with one_at_a_time(f"connection-refresh:{connection.pk}", busy=busy):
            current = await sync_to_async(_load)(provider, connection.subject)
            if current is None:
                return None
            if current.access_token_sealed != seen and (force or _usable(current)):
                return current  # another process refreshed it while this one waited
            if not current.refresh_token_sealed:
                await sync_to_async(services.connection_drop)(connection=current, reason="expired")
                return None
            secret = await sync_to_async(provider_secret)(provider)
            try:
                token = await client.refresh(provider, secret, refresh_token=unseal(current.refresh_token_sealed))
            except client.ProviderError as exc:
                if exc.error in ("invalid_grant", "invalid_token", "unauthorized_client"):
                    log.info("connection %s: the provider refused the refresh (%s)", current.pk, exc.error)
                    await sync_to_async(services.connection_drop)(
                        connection=current, reason=f"refresh failed ({exc.error})"
                    )
                    return None
                raise BackendError(f"could not refresh the connection's token: {exc}", retryable=True) from None
            return await sync_to_async(services.connection_refreshed)(connection_id=current.pk, token=token)

    async def exchanged_token(self, caller: Caller, provider: str, audience: str, scopes: list[str]) -> Token:
        """RFC 8693: the caller's own token, exchanged at the provider that issued it for one
        whose audience is ``audience``. The caller's token goes only to its own issuer.

        Exchanged tokens are cached in Redis, sealed with the vault, per (caller's token,
        audience, scopes) until 30 s before they expire: a tool called in a loop costs one
        exchange, and a new caller token (a new sign-in) starts afresh."""
        found = await sync_to_async(provider_named)(caller.tenant_id, provider)
        if found is None:
            raise await sync_to_async(_missing)(caller, provider)
        if not caller.bearer:
            raise BackendError(
                "token exchange needs the caller's own OAuth token, which this call does not have "
                "(an API key's call, or one run on a worker)"
            )
        if not found.issuer or caller.oauth_issuer.rstrip("/") != found.issuer.rstrip("/"):
            raise BackendError(
                f"the caller's token was not issued by the provider {provider!r}: it cannot be exchanged there"
            )
        digest = hashlib.sha256(f"{caller.bearer}\n{audience}\n{' '.join(sorted(scopes))}".encode()).hexdigest()
        key = f"toolbay:token-exchange:{found.pk}:{digest}"
        label = f"{found.name} exchange for {audience}"
        redis = async_redis()
        cached = await redis.get(key)
        if cached:
            return Token(unseal(cached.decode() if isinstance(cached, bytes) else cached), label)
        secret = await sync_to_async(provider_secret)(found)
        try:
            issued = await client.exchange_token(
                found, secret, subject_token=caller.bearer, audience=audience, scopes=scopes
            )
        except client.ProviderError as exc:
            raise BackendError(f"the provider {provider!r} refused the token exchange: {exc}") from None
        value = issued["access_token"]
        lifetime = int(issued.get("expires_in") or 0) - EXCHANGE_CACHE_MARGIN_SECONDS
        if lifetime > 0:
            await redis.set(key, seal(value), ex=lifetime)
        return Token(value, label)


broker = Broker()
