"""/api/v1/: one router route per resource (viewsets from ``api.v1.views``) and ``me/``."""

from django.urls import path
from rest_framework.routers import DefaultRouter

from api.v1 import views

router = DefaultRouter()
router.register("tenants", views.TenantViewSet, basename="tenant")
router.register("memberships", views.MembershipViewSet, basename="membership")
router.register("api-keys", views.ApiKeyViewSet, basename="apikey")
router.register("tools", views.ToolViewSet, basename="tool")
router.register("resources", views.ResourceViewSet, basename="resource")
router.register("resource-templates", views.ResourceTemplateViewSet, basename="resourcetemplate")
router.register("prompts", views.PromptViewSet, basename="prompt")
router.register("openapi-imports", views.OpenApiImportViewSet, basename="openapiimport")
router.register("pending-definitions", views.PendingDefinitionViewSet, basename="pendingdefinition")
router.register("access-rules", views.AccessRuleViewSet, basename="accessrule")
router.register("tokens", views.AccessTokenViewSet, basename="accesstoken")
router.register("sessions", views.SessionViewSet, basename="session")
router.register("invocations", views.InvocationViewSet, basename="invocation")
router.register("audit-events", views.AuditEventViewSet, basename="auditevent")
router.register("oauth-settings", views.OAuthSettingsViewSet, basename="oauthsettings")
router.register("trusted-issuers", views.TrustedIssuerViewSet, basename="trustedissuer")
router.register("oauth-clients", views.OAuthClientViewSet, basename="oauthclient")
router.register("oauth-grants", views.OAuthGrantViewSet, basename="oauthgrant")
router.register("connection-providers", views.ConnectionProviderViewSet, basename="connectionprovider")
router.register("connections", views.ConnectionViewSet, basename="connection")

app_name = "v1"
urlpatterns = [
    path("me/", views.MeView.as_view(), name="me"),
    *router.urls,
]
