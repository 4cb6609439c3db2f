"""The pages of per-user connections: the connect link a tool call hands out, the provider's
callback, and "your connections" (see and remove them).

A connect link names a ``ConnectAttempt`` made for one principal. Only the Toolbay user that
principal belongs to can open it (after signing in), it works once and for a short time, and
the provider's callback is honoured only in the browser session that started it: a link that
someone else got hold of connects no one.
"""

from __future__ import annotations

from urllib.parse import urlencode

from asgiref.sync import async_to_sync
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from oauth.connections import client, services
from oauth.connections.selectors import connections_of_user, provider_secret
from oauth.models import ConnectAttempt
from oauth.signing import public_jwks
from tenants.models import Tenant

LOGIN_URL = "/oauth/login/"


def _refused(request: HttpRequest, message: str, status: int = 404) -> HttpResponse:
    return render(request, "oauth/connect_error.html", {"message": message}, status=status)


UNUSABLE = "This connect link is unknown, already used, expired, or was made for someone else."


def _attempt(request: HttpRequest, slug: str, provider: str, attempt_id: str) -> ConnectAttempt | None:
    assert request.user.pk is not None  # signed in
    rows = ConnectAttempt.objects.select_related("provider", "tenant").filter(
        pk=attempt_id,
        provider__name=provider,
        tenant__slug=slug,
        user_id=request.user.pk,
        started_at__isnull=True,
        used_at__isnull=True,
        expires_at__gt=timezone.now(),
    )
    return rows.first()


@never_cache
@require_http_methods(["GET", "POST"])
def connect_start(request: HttpRequest, slug: str, provider: str, attempt_id: str) -> HttpResponseBase:
    """Sign in to Toolbay if needed, confirm, then go to the provider's consent."""
    if not request.user.is_authenticated:
        return redirect(f"{LOGIN_URL}?{urlencode({'next': request.get_full_path()})}")
    attempt = _attempt(request, slug, provider, attempt_id)
    if attempt is None:
        return _refused(request, UNUSABLE)
    name = attempt.provider.display_name or attempt.provider.name
    if request.method == "GET":
        return render(request, "oauth/connect.html", {"attempt": attempt, "provider_name": name})
    if not request.session.session_key:
        request.session.save()
    started = services.attempt_start(
        attempt_id=attempt.pk, user_id=request.user.pk, session_key=request.session.session_key or ""
    )
    if started is None:
        return _refused(request, UNUSABLE)
    attempt, verifier = started
    try:
        url = async_to_sync(client.authorization_url)(
            attempt.provider,
            redirect_uri=services.redirect_uri(services.public_base(), attempt.provider),
            state=attempt.state,
            code_verifier=verifier,
            scopes=list(attempt.scopes),
        )
    except client.ProviderError as exc:
        return _refused(request, f"{name} cannot be reached right now ({exc}). Try again later.", status=502)
    return redirect(url)


@never_cache
@login_required(login_url=LOGIN_URL)
def connect_callback(request: HttpRequest, slug: str, provider: str) -> HttpResponse:
    """Where the provider sends the browser back: spend the attempt, redeem the code."""
    assert request.user.pk is not None  # login_required
    finished = services.attempt_finish(
        state=request.GET.get("state", ""), user_id=request.user.pk, session_key=request.session.session_key or ""
    )
    if finished is None:
        return _refused(request, UNUSABLE, status=400)
    attempt, verifier = finished
    if attempt.provider.name != provider:
        return _refused(request, UNUSABLE, status=400)
    name = attempt.provider.display_name or attempt.provider.name
    if "error" in request.GET or not request.GET.get("code"):
        error = request.GET.get("error", "no code")[:100]
        return _refused(request, f"{name} did not grant access ({error}).", status=400)
    secret = provider_secret(attempt.provider)
    try:
        token = async_to_sync(client.exchange_code)(
            attempt.provider,
            secret,
            code=request.GET["code"],
            redirect_uri=services.redirect_uri(services.public_base(), attempt.provider),
            code_verifier=verifier,
        )
    except client.ProviderError as exc:
        return _refused(request, f"{name} refused to complete the connection ({exc.error or exc}).", status=502)
    info = async_to_sync(client.userinfo)(attempt.provider, token["access_token"])
    services.connection_store(attempt=attempt, token=token, account=str(info.get("sub", ""))[:255])
    return render(request, "oauth/connected.html", {"provider_name": name, "tenant": attempt.tenant})


@never_cache
@login_required(login_url=LOGIN_URL)
@require_http_methods(["GET", "POST"])
def my_connections(request: HttpRequest) -> HttpResponse:
    """The signed-in user's connections on every tenant; remove (and revoke) any of them."""
    if request.method == "POST":
        connection = connections_of_user(request.user).filter(pk=request.POST.get("connection", "") or 0).first()
        if connection is not None:
            services.connection_disconnect(connection=connection)
        return redirect("connections:mine")
    return render(request, "oauth/connections.html", {"connections": connections_of_user(request.user)})


def jwks(request: HttpRequest, slug: str) -> JsonResponse:
    """The public keys that verify the tenant's signed caller assertions (and its tokens)."""
    tenant = Tenant.objects.filter(slug=slug).first()
    if tenant is None:
        raise Http404("No such tenant")
    response = JsonResponse(public_jwks(tenant.pk))
    response["Cache-Control"] = "public, max-age=300"
    return response
