"""Routes of the operator console, mounted at ``/console/``."""

from django.contrib.auth.views import LogoutView
from django.urls import path, re_path, reverse_lazy

from console import approvals, definitions, views

app_name = "console"

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("login/", views.ConsoleLoginView.as_view(), name="login"),
    path("logout/", LogoutView.as_view(next_page=reverse_lazy("console:login")), name="logout"),
    path("invocations/", views.invocation_list, name="invocations"),
    path("invocations/<int:pk>/", views.invocation_detail, name="invocation"),
    re_path(r"^invocations/export\.(?P<kind>csv|json)$", views.invocation_export, name="invocations-export"),
    path("quarantine/", views.quarantine_list, name="quarantine"),
    path("changes/", views.change_list, name="changes"),
    path("changes/<int:pk>/", views.change_detail, name="change"),
    re_path(r"^changes/export\.(?P<kind>csv|json)$", views.change_export, name="changes-export"),
    path("approvals/", approvals.approval_list, name="approvals"),
    path("approvals/pending/", approvals.approval_rows, name="approval-rows"),
    path("approvals/<str:pk>/decision/", approvals.approval_decision, name="approval-decision"),
    path("definitions/", definitions.definition_list, name="definitions"),
    path("definitions/<int:pk>/decision/", definitions.definition_decision, name="definition-decision"),
]
