"""OAuth over HTTP: Protected Resource Metadata of each tenant's MCP endpoint, and the
embedded authorization server's endpoints, sign-in, consent and "your authorizations".

Views parse, call Authlib (``oauth.server.authorization``) or a selector, and answer. The
embedded server of a tenant exists only while the tenant has OAuth on with the embedded
server; otherwise its URLs answer 404 like an unknown tenant's.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode, urlsplit

import orjson
from authlib.oauth2.rfc6749.errors import OAuth2Error
from django.conf import settings
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods

from mcp_platform.redis_clients import sync_redis
from oauth import locations
from oauth.models import OAuthClient
from oauth.selectors import grants_of_user, resource_settings, server_settings
from oauth.server.authorization import (
    AuthorizedUser,
    TenantAuthorizationServer,
    consent_covers,
    consent_record,
    grant_revoke,
    groups_of,
    may_authorize,
)
from oauth.signing import public_jwks

LOGIN_URL = "/oauth/login/"
MAX_REGISTRATION_BYTES = 16 * 1024
SCOPE_DESCRIPTIONS = {"list": "See which tools you may use", "call": "Run those tools on your behalf"}

View = Callable[..., HttpResponseBase]


def open_cors(view: View) -> View:
    """Metadata, keys, token, registration and revocation are read by browser-based clients
    from any origin; none of them uses cookies, so any origin may."""

    @functools.wraps(view)  # keeps csrf_exempt and the other markers of the view
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if request.method == "OPTIONS":
            response: HttpResponseBase = HttpResponse(status=204)
        else:
            response = view(request, *args, **kwargs)
        response["Access-Control-Allow-Origin"] = "*"
        response["Access-Control-Allow-Methods"] = "GET, POST, OPTIONS"
        response["Access-Control-Allow-Headers"] = "Authorization, Content-Type, MCP-Protocol-Version"
        return response

    return wrapped


def _json(document: dict[str, Any], status: int = 200) -> JsonResponse:
    return JsonResponse(document, status=status, json_dumps_params={"separators": (",", ":")})


# --- resource server --------------------------------------------------------------------


def _protected_resource(request: HttpRequest, slug: str) -> JsonResponse:
    found = resource_settings(slug)
    if found is None:
        raise Http404("No such MCP endpoint, or it offers no OAuth")
    tenant, config, issuers = found
    origin = locations.request_origin(request)
    servers = [locations.issuer_url(origin, slug)] if config.embedded_server else []
    servers += [issuer.issuer for issuer in issuers if issuer.advertise]
    if not servers:  # nothing a client could sign in at: do not send it looking (MCP §11)
        raise Http404("This MCP endpoint advertises no authorization server")
    return _json(
        {
            "resource": locations.resource_url(origin, slug),
            "authorization_servers": servers,
            "scopes_supported": config.scopes_supported,
            "bearer_methods_supported": ["header"],
            "resource_name": tenant.name,
        }
    )


@open_cors
@require_http_methods(["GET", "OPTIONS"])
def protected_resource(request: HttpRequest, slug: str) -> JsonResponse:
    """RFC 9728 metadata of ``/mcp/<slug>`` (path-inserted location)."""
    return _protected_resource(request, slug)


@open_cors
@require_http_methods(["GET", "OPTIONS"])
def protected_resource_root(request: HttpRequest) -> JsonResponse:
    """The root location: the metadata of ``TOOLBAY_OAUTH_ROOT_TENANT``'s endpoint, if set."""
    if not settings.TOOLBAY_OAUTH_ROOT_TENANT:
        raise Http404("Protected resource metadata is per tenant: /.well-known/oauth-protected-resource/mcp/<slug>")
    return _protected_resource(request, settings.TOOLBAY_OAUTH_ROOT_TENANT)


# --- authorization server ---------------------------------------------------------------


def _server(
    request: HttpRequest, slug: str, *, admit_new_client: Callable[[], bool] | None = None
) -> TenantAuthorizationServer:
    found = server_settings(slug)
    if found is None:
        raise Http404("No authorization server here")
    tenant, config = found
    return TenantAuthorizationServer(
        tenant, config, locations.request_origin(request), admit_new_client=admit_new_client
    )


@open_cors
@require_http_methods(["GET", "OPTIONS"])
def server_metadata(request: HttpRequest, slug: str) -> JsonResponse:
    """RFC 8414 metadata of the tenant's embedded authorization server."""
    return _json(_server(request, slug).metadata())


@open_cors
@require_http_methods(["GET", "OPTIONS"])
def jwks(request: HttpRequest, slug: str) -> JsonResponse:
    return _json(public_jwks(_server(request, slug).tenant.pk))


@open_cors
@csrf_exempt
@never_cache
@require_http_methods(["POST", "OPTIONS"])
def token(request: HttpRequest, slug: str) -> HttpResponse:
    response: HttpResponse = _server(request, slug).create_token_response(request)
    return response


@open_cors
@csrf_exempt
@never_cache
@require_http_methods(["POST", "OPTIONS"])
def revoke(request: HttpRequest, slug: str) -> HttpResponse:
    response: HttpResponse = _server(request, slug).create_endpoint_response("revocation", request)
    return response


def _client_address(request: HttpRequest) -> str:
    return str(request.META.get("REMOTE_ADDR") or "unknown")


def _registration_allowed(slug: str, address: str) -> bool:
    """At most TOOLBAY_OAUTH_REGISTRATIONS_PER_HOUR registrations per address and tenant."""
    key = f"toolbay:oauth:registrations:{slug}:{address}:{int(time.time() // 3600)}"
    pipe = sync_redis().pipeline(transaction=False)
    pipe.incr(key)
    pipe.expire(key, 3700)
    count, _ = pipe.execute()
    return int(count) <= settings.TOOLBAY_OAUTH_REGISTRATIONS_PER_HOUR


@open_cors
@csrf_exempt
@never_cache
@require_http_methods(["POST", "OPTIONS"])
def register(request: HttpRequest, slug: str) -> HttpResponse:
    """RFC 7591 dynamic client registration (open, rate-limited, size-limited)."""
    server = _server(request, slug)
    if not server.config.registration_open:
        raise Http404("This server does not take registrations")
    if len(request.body) > MAX_REGISTRATION_BYTES:
        return _json({"error": "invalid_client_metadata", "error_description": "Too large"}, 413)
    try:
        body = orjson.loads(request.body or b"null")
    except orjson.JSONDecodeError:
        body = None
    if not isinstance(body, dict):
        return _json({"error": "invalid_client_metadata", "error_description": "Send a JSON object"}, 400)
    if not _registration_allowed(slug, _client_address(request)):
        response = _json({"error": "invalid_request", "error_description": "Too many registrations; try later"}, 429)
        response["Retry-After"] = "3600"
        return response
    answer: HttpResponse = server.create_endpoint_response("client_registration", request)
    return answer


def _scope_lines(server: TenantAuthorizationServer, scope: str) -> list[tuple[str, str]]:
    lines = []
    for word in scope.split():
        if word == server.config.list_scope:
            lines.append((word, SCOPE_DESCRIPTIONS["list"]))
        elif word == server.config.call_scope:
            lines.append((word, SCOPE_DESCRIPTIONS["call"]))
        else:
            lines.append((word, ""))
    return lines


@never_cache
@require_http_methods(["GET", "POST"])
def authorize(request: HttpRequest, slug: str) -> HttpResponseBase:
    """The authorization endpoint: sign in, then consent (or not) to the client's request."""
    if not request.user.is_authenticated:
        _server(request, slug)  # 404 for a tenant without an embedded server, signed in or not
        return redirect(f"{LOGIN_URL}?{urlencode({'next': request.get_full_path()})}")
    address = _client_address(request)

    def admit_new_client() -> bool:
        # Here, and only here, an unknown metadata document client is fetched: for a member
        # of the tenant, counted as a registration from this address.
        return may_authorize(request.user, server.tenant) and _registration_allowed(slug, address)

    server = _server(request, slug, admit_new_client=admit_new_client)
    try:
        consent = server.get_consent_grant(request, end_user=request.user)
    except OAuth2Error as error:
        if getattr(error, "redirect_uri", None):
            response: HttpResponse = server.handle_error_response(server.create_oauth2_request(request), error)
            server.issuer_parameter.add_issuer_parameter(server, response)
            return response
        return render(
            request,
            "oauth/error.html",
            {"tenant": server.tenant, "error": error.error, "description": error.description},
            status=400,
        )
    client_row: OAuthClient = consent.client.row
    scope: str = consent.request.scope or ""
    if not may_authorize(request.user, server.tenant):
        return render(request, "oauth/not_member.html", {"tenant": server.tenant}, status=403)
    decision = request.POST.get("decision") if request.method == "POST" else None
    existing = consent_covers(tenant=server.tenant, user=request.user, client=client_row, scope=scope)
    if decision is None and existing is None:
        redirect_uri = consent.request.payload.redirect_uri or consent.client.get_default_redirect_uri() or ""
        return render(
            request,
            "oauth/consent.html",
            {
                "tenant": server.tenant,
                "client": client_row,
                "client_host": urlsplit(client_row.client_id).hostname
                if client_row.kind == "metadata_document"
                else "",
                "redirect_host": urlsplit(redirect_uri).netloc or redirect_uri,
                "scopes": _scope_lines(server, scope),
                "resource": server.resource,
            },
        )
    if decision not in (None, "approve"):  # "deny", and anything else but an explicit yes
        denied: HttpResponse = server.create_authorization_response(request, grant_user=None, grant=consent)
        return denied
    grant = existing or consent_record(tenant=server.tenant, user=request.user, client=client_row, scope=scope)
    authorized = AuthorizedUser(request.user, grant, groups_of(request.user, server.tenant))
    approved: HttpResponse = server.create_authorization_response(request, grant_user=authorized, grant=consent)
    return approved


class LoginView(auth_views.LoginView):
    """Django's login, for the people who authorize MCP clients."""

    template_name = "oauth/login.html"
    redirect_authenticated_user = True


@login_required(login_url=LOGIN_URL)
@require_http_methods(["GET", "POST"])
def authorizations(request: HttpRequest) -> HttpResponse:
    """The clients the signed-in user authorized, on every tenant; revoke any of them."""
    if request.method == "POST":
        grant = grants_of_user(request.user).filter(pk=request.POST.get("grant", "")).first()
        if grant is not None and grant.revoked_at is None:
            grant_revoke(grant=grant)
        return redirect("oauth:authorizations")
    return render(request, "oauth/authorizations.html", {"grants": grants_of_user(request.user)})
