"""Routes of staff sign-in, mounted at ``/staff/``."""

from django.urls import path

from staff_auth import views

app_name = "staff_auth"

urlpatterns = [
    path("", views.landing, name="landing"),
    path("sso/login/", views.sso_start, name="sso-login"),
    path("sso/callback/", views.sso_callback, name="sso-callback"),
]
