"""/api/: the versioned REST API, its OpenAPI schema and the docs page (assets served locally)."""

from django.http import HttpRequest, JsonResponse
from django.urls import include, path, re_path
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView


@csrf_exempt  # it changes nothing, and a POST to a wrong path should still hear "not found"
def not_found(request: HttpRequest) -> JsonResponse:
    """Unknown API paths answer JSON like every other API error (not Django's HTML page)."""
    detail = "Not found."
    if not request.path.endswith("/"):
        detail += " API paths end with a slash, e.g. /api/v1/tools/."
    return JsonResponse({"detail": detail}, status=404)


urlpatterns = [
    path("v1/", include("api.v1.urls", namespace="v1")),
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # Swagger UI from drf-spectacular-sidecar's static files: no CDN, works offline. (Redoc's
    # page is left out: its template loads web fonts from Google.)
    path("docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    re_path(r"^", not_found),
]
