"""Routes of per-user connections, under /connect/."""

from __future__ import annotations

from django.urls import path

from oauth.connections import views

app_name = "connections"

urlpatterns = [
    path("", views.my_connections, name="mine"),
    path("<slug:slug>/<slug:provider>/start/<str:attempt_id>", views.connect_start, name="start"),
    path("<slug:slug>/<slug:provider>/callback", views.connect_callback, name="callback"),
    path("<slug:slug>/jwks", views.jwks, name="jwks"),
]
