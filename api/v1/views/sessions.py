"""``/api/v1/sessions/``: open MCP sessions, as the operator console shows them; operators
and up list them and end one."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from api.access import require_role
from api.v1.serializers.sessions import SessionEndSerializer, SessionSerializer
from api.v1.views.base import ScopedViewSet
from api.v1.views.params import TENANT_PARAM, query_str
from console.live_sessions import live_sessions_of, session_end
from tenants.scope import Role
from tenants.selectors import tenants_in


class SessionViewSet(ScopedViewSet):
    """Open MCP sessions, as the operator console shows them. Operators and up."""

    pagination_class = None  # sessions live in Redis, listed whole like the console does
    action_roles = {"end": Role.OPERATOR}

    @extend_schema(
        parameters=[TENANT_PARAM],
        responses=SessionSerializer(many=True),
        description="Open sessions of the tenants where you are an operator or more, most recently seen first.",
    )
    def list(self, request: Request) -> Response:
        tenants = tenants_in(self.scope, Role.OPERATOR, slug=query_str(request, "tenant"))
        rows = live_sessions_of(list(tenants))
        return Response(SessionSerializer(rows, many=True).data)

    @extend_schema(
        request=SessionEndSerializer,
        responses={204: None},
        description="End a session: the client's next request answers 404 and its notification stream closes.",
    )
    @action(detail=False, methods=["post"])
    def end(self, request: Request) -> Response:
        body = SessionEndSerializer(data=request.data, context=self.get_serializer_context())
        body.is_valid(raise_exception=True)
        tenant = body.validated_data["tenant"]
        require_role(self.scope, tenant.pk, Role.OPERATOR)
        if not session_end(tenant=tenant, session_id=body.validated_data["session"]):
            raise NotFound("The tenant has no open session with this id.")
        return Response(status=status.HTTP_204_NO_CONTENT)
