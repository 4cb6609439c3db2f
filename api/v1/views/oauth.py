"""``/api/v1/oauth-settings/``, ``/api/v1/trusted-issuers/``, ``/api/v1/oauth-clients/`` and
``/api/v1/oauth-grants/``: a tenant's OAuth. Everyone in the tenant reads; admins and owners
change settings and issuers, pre-register and delete clients, revoke consents."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, serializers
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from api.access import require_role
from api.pagination import TenantCursorPagination
from api.v1.serializers.oauth import (
    ConnectionProviderSerializer,
    ConnectionSerializer,
    GrantSerializer,
    OAuthClientCreatedSerializer,
    OAuthClientSerializer,
    OAuthSettingsSerializer,
    TrustedIssuerSerializer,
)
from api.v1.views.base import WRITE_ROLES, ScopedViewSet
from api.v1.views.params import TENANT_PARAM, query_str
from oauth import selectors as oauth_selectors
from oauth import services as oauth_services
from oauth.connections import selectors as connection_selectors
from oauth.connections.services import connection_disconnect
from oauth.models import Connection, ConnectionProvider, Grant, OAuthClient, TenantOAuth, TrustedIssuer
from oauth.server.authorization import grant_revoke
from tenants.scope import Role
from tenants.selectors import tenants_in


@extend_schema_view(
    list=extend_schema(parameters=[TENANT_PARAM]),
    update=extend_schema(description="Admins and owners. Creates the settings when the tenant has none."),
)
class OAuthSettingsViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.UpdateModelMixin, ScopedViewSet):
    serializer_class = OAuthSettingsSerializer
    pagination_class = TenantCursorPagination
    lookup_field = "tenant__slug"
    lookup_url_kwarg = "tenant"
    lookup_value_regex = "[-a-zA-Z0-9_]+"
    action_roles = WRITE_ROLES

    def get_queryset(self) -> QuerySet[TenantOAuth]:
        return oauth_selectors.oauth_settings_in(self.scope, tenant_slug=query_str(self.request, "tenant"))

    def update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        tenant = tenants_in(self.scope, slug=kwargs["tenant"]).first()
        if tenant is None:
            raise NotFound()
        require_role(self.scope, tenant.pk, Role.ADMIN)
        current = TenantOAuth.objects.filter(tenant=tenant).first()
        serializer = self.get_serializer(current, data=request.data, partial=kwargs.get("partial", False))
        serializer.is_valid(raise_exception=True)
        row = oauth_services.oauth_settings_set(tenant=tenant, changes=dict(serializer.validated_data))
        return Response(self.get_serializer(row).data)


class _TenantAdminsEdit(
    mixins.ListModelMixin,
    mixins.CreateModelMixin,
    mixins.RetrieveModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    ScopedViewSet,
):
    """Rows a tenant owns that its admins edit: ``selected`` scopes them to the user (and to
    ``?tenant=`` on lists); creating one needs the admin role in its tenant."""

    action_roles = WRITE_ROLES

    def selected(self, tenant_slug: str | None) -> QuerySet[Any]:
        raise NotImplementedError

    def get_queryset(self) -> QuerySet[Any]:
        return self.selected(query_str(self.request, "tenant") if self.action == "list" else None)

    def perform_create(self, serializer: serializers.BaseSerializer) -> None:
        require_role(self.scope, serializer.validated_data["tenant"].pk, Role.ADMIN)
        serializer.save()


@extend_schema_view(list=extend_schema(parameters=[TENANT_PARAM]))
class TrustedIssuerViewSet(_TenantAdminsEdit):
    serializer_class = TrustedIssuerSerializer

    def selected(self, tenant_slug: str | None) -> QuerySet[TrustedIssuer]:
        return oauth_selectors.trusted_issuers_in(self.scope, tenant_slug=tenant_slug)


@extend_schema_view(
    list=extend_schema(parameters=[TENANT_PARAM]),
    create=extend_schema(
        responses={201: OAuthClientCreatedSerializer},
        description="Admins and owners: pre-register a client. The answer carries its secret, once.",
    ),
)
class OAuthClientViewSet(
    mixins.ListModelMixin, mixins.CreateModelMixin, mixins.RetrieveModelMixin, mixins.DestroyModelMixin, ScopedViewSet
):
    serializer_class = OAuthClientSerializer
    action_roles = WRITE_ROLES

    def get_queryset(self) -> QuerySet[OAuthClient]:
        slug = query_str(self.request, "tenant") if self.action == "list" else None
        return oauth_selectors.oauth_clients_in(self.scope, tenant_slug=slug)

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        require_role(self.scope, serializer.validated_data["tenant"].pk, Role.ADMIN)
        client = serializer.save()
        context = {**self.get_serializer_context(), "client_secret": serializer.issued_secret}
        return Response(OAuthClientCreatedSerializer(client, context=context).data, status=201)


@extend_schema_view(list=extend_schema(parameters=[TENANT_PARAM]))
class OAuthGrantViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ScopedViewSet):
    """The consents the tenant's members gave to clients of the embedded server."""

    serializer_class = GrantSerializer
    action_roles = {"revoke": Role.ADMIN}

    def get_queryset(self) -> QuerySet[Grant]:
        slug = query_str(self.request, "tenant") if self.action == "list" else None
        return oauth_selectors.grants_in(self.scope, tenant_slug=slug)

    @extend_schema(request=None, responses=GrantSerializer, description="Admins and owners. Idempotent.")
    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, pk: str | None = None) -> Response:
        grant = self.get_object()
        if grant.revoked_at is None:
            grant_revoke(grant=grant)
        return Response(GrantSerializer(grant, context=self.get_serializer_context()).data)


@extend_schema_view(list=extend_schema(parameters=[TENANT_PARAM]))
class ConnectionProviderViewSet(_TenantAdminsEdit):
    """The tenant's per-user connection providers (OAuth 2.0 / OpenID Connect)."""

    serializer_class = ConnectionProviderSerializer

    def selected(self, tenant_slug: str | None) -> QuerySet[ConnectionProvider]:
        return connection_selectors.providers_in(self.scope, tenant_slug=tenant_slug)


@extend_schema_view(
    list=extend_schema(parameters=[TENANT_PARAM]),
    destroy=extend_schema(description="Admins and owners: disconnect (revoked at the provider first)."),
)
class ConnectionViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.DestroyModelMixin, ScopedViewSet):
    """Who in the tenant is connected to which provider (never a token)."""

    serializer_class = ConnectionSerializer
    action_roles = WRITE_ROLES

    def get_queryset(self) -> QuerySet[Connection]:
        slug = query_str(self.request, "tenant") if self.action == "list" else None
        return connection_selectors.connections_in_scope(self.scope, tenant_slug=slug)

    def perform_destroy(self, instance: Connection) -> None:
        connection_disconnect(connection=instance)
