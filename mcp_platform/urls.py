"""Django's routes: admin, REST API, console, health and metrics (``/mcp/`` is routed in ``asgi.py``)."""

from django.contrib import admin
from django.contrib.staticfiles.urls import staticfiles_urlpatterns
from django.http import HttpRequest, JsonResponse
from django.urls import include, path

from console.live_sessions_page import live_sessions
from console.packaged_instances_page import packaged_instances
from mcp_platform.health import metrics, readyz


def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


# A dependency that did not answer is a 503 with Retry-After, never a bare 500 (faults.py).
handler500 = "mcp_platform.faults.server_error"

urlpatterns = [
    path("admin/live-sessions/", admin.site.admin_view(live_sessions), name="operator-live-sessions"),
    path(
        "admin/packaged-instances/",
        admin.site.admin_view(packaged_instances),
        name="operator-packaged-instances",
    ),
    path("admin/", admin.site.urls),
    path("healthz", healthz),
    path("readyz", readyz),
    path("metrics", metrics),
    path("console/", include("console.urls")),
    path("staff/", include("staff_auth.urls")),
    path("api/", include("api.urls")),
    path("connect/", include("oauth.connections.urls")),
    path("", include("oauth.urls")),
]

# With DEBUG=1 (`make run`) Django serves static files itself: the admin's styles and the
# API docs page's Swagger UI. In production the reverse proxy serves STATIC_ROOT
# (deploy/nginx.conf) and this adds nothing.
urlpatterns += staticfiles_urlpatterns()
