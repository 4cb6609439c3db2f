"""``/api/v1/tokens/``: the caller's own personal access tokens (``tbp_…``) for scripts."""

from __future__ import annotations

from typing import Any

from django.db.models import Model, QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from api.models import PersonalAccessToken
from api.selectors import access_tokens_of
from api.services import access_token_revoke
from api.v1.serializers.tokens import AccessTokenCreatedSerializer, AccessTokenSerializer
from api.v1.views.base import ScopedViewSet


@extend_schema_view(
    list=extend_schema(description="Your own tokens."),
    create=extend_schema(
        responses={201: AccessTokenCreatedSerializer},
        description="A token for scripts, acting as you. The answer carries the raw token, once.",
    ),
)
class AccessTokenViewSet(
    mixins.ListModelMixin,
    mixins.CreateModelMixin,
    mixins.RetrieveModelMixin,
    ScopedViewSet,
):
    serializer_class = AccessTokenSerializer

    def get_queryset(self) -> QuerySet[PersonalAccessToken]:
        return access_tokens_of(self.request.user)

    def object_tenant_id(self, obj: Model) -> int | None:
        return None  # a user's own, in no tenant

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        token = serializer.save()
        return Response(AccessTokenCreatedSerializer(token, context=self.get_serializer_context()).data, status=201)

    @extend_schema(request=None, responses=AccessTokenSerializer, description="Idempotent.")
    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, pk: str | None = None) -> Response:
        token = access_token_revoke(token=self.get_object())
        return Response(AccessTokenSerializer(token).data)
