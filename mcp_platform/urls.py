from django.contrib import admin
from django.http import HttpRequest, JsonResponse
from django.urls import path

from tools_app.views_operator import live_sessions


def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


urlpatterns = [
    path("admin/live-sessions/", admin.site.admin_view(live_sessions), name="operator-live-sessions"),
    path("admin/", admin.site.urls),
    path("healthz", healthz),
]
