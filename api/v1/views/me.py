"""``GET /api/v1/me/``: who the credential belongs to, and where they hold which role."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api.v1.serializers.me import MeSerializer
from tenants.selectors import memberships_listed_for


class MeView(APIView):
    """Who the credential belongs to, and where they hold which role."""

    @extend_schema(responses=MeSerializer, operation_id="me_retrieve")
    def get(self, request: Request) -> Response:
        user = request.user
        memberships = [{"tenant": slug, "role": role} for slug, role in memberships_listed_for(user.pk)]
        data = {"username": user.get_username(), "is_superuser": user.is_superuser, "memberships": memberships}
        return Response(MeSerializer(data).data)
