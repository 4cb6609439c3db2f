"""Views of the v1 API, one module per resource: parse, check the role, call one service or
selector, serialize.

Every read is a selector that starts from the caller's ``TenantScope`` (``tenants.scope``),
so another tenant's object answers 404 like a missing one. ``base`` holds what the
viewsets share, ``params`` how query parameters are read.
"""

from api.v1.views.access_rules import AccessRuleViewSet
from api.v1.views.api_keys import ApiKeyViewSet
from api.v1.views.audit_log import AuditEventViewSet, InvocationViewSet
from api.v1.views.me import MeView
from api.v1.views.memberships import MembershipViewSet
from api.v1.views.oauth import (
    ConnectionProviderViewSet,
    ConnectionViewSet,
    OAuthClientViewSet,
    OAuthGrantViewSet,
    OAuthSettingsViewSet,
    TrustedIssuerViewSet,
)
from api.v1.views.openapi_imports import OpenApiImportViewSet
from api.v1.views.pending_definitions import PendingDefinitionViewSet
from api.v1.views.resources import PromptViewSet, ResourceTemplateViewSet, ResourceViewSet
from api.v1.views.sessions import SessionViewSet
from api.v1.views.tenants import TenantViewSet
from api.v1.views.tokens import AccessTokenViewSet
from api.v1.views.tools import ToolViewSet

__all__ = [
    "AccessRuleViewSet",
    "AccessTokenViewSet",
    "ApiKeyViewSet",
    "AuditEventViewSet",
    "ConnectionProviderViewSet",
    "ConnectionViewSet",
    "InvocationViewSet",
    "MeView",
    "MembershipViewSet",
    "OAuthClientViewSet",
    "OAuthGrantViewSet",
    "OAuthSettingsViewSet",
    "OpenApiImportViewSet",
    "PendingDefinitionViewSet",
    "PromptViewSet",
    "ResourceTemplateViewSet",
    "ResourceViewSet",
    "SessionViewSet",
    "TenantViewSet",
    "ToolViewSet",
    "TrustedIssuerViewSet",
]
