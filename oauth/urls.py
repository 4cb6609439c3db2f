"""Routes of the OAuth app: well-known metadata at the root, the embedded server under /oauth/."""

from __future__ import annotations

from django.contrib.auth.views import LogoutView
from django.urls import path

from oauth import views

app_name = "oauth"

SLUG = "<slug:slug>"

well_known = [
    path(".well-known/oauth-protected-resource/mcp/<slug:slug>", views.protected_resource, name="prm"),
    path(".well-known/oauth-protected-resource", views.protected_resource_root, name="prm-root"),
    path(f".well-known/oauth-authorization-server/oauth/{SLUG}", views.server_metadata, name="metadata"),
]

server = [
    path("oauth/login/", views.LoginView.as_view(), name="login"),
    path("oauth/logout/", LogoutView.as_view(next_page="/oauth/login/"), name="logout"),
    path("oauth/authorizations/", views.authorizations, name="authorizations"),
    path(f"oauth/{SLUG}/.well-known/oauth-authorization-server", views.server_metadata, name="metadata-suffix"),
    path(f"oauth/{SLUG}/authorize", views.authorize, name="authorize"),
    path(f"oauth/{SLUG}/token", views.token, name="token"),
    path(f"oauth/{SLUG}/register", views.register, name="register"),
    path(f"oauth/{SLUG}/revoke", views.revoke, name="revoke"),
    path(f"oauth/{SLUG}/jwks", views.jwks, name="jwks"),
]

urlpatterns = well_known + server
