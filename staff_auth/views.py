"""Staff SSO's two steps (leave for the provider, come back) and the page after sign-in."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.urls import reverse, reverse_lazy
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from staff_auth import oidc, services
from tenants.scope import Role, tenant_scope

# The browser's own proof that it started the sign-in: a callback whose state this session
# did not ask for is someone else's (login CSRF) and is refused before anything is spent.
SESSION_STATE = "staff_sso_state"
# The session keeps the backend's path so it can load the user on later requests.
BACKEND = "staff_auth.backends.ThrottledPasswordBackend"


def _redirect_uri(request: HttpRequest) -> str:
    path = reverse("staff_auth:sso-callback")
    public: str = settings.TOOLBAY_PUBLIC_URL
    return f"{public}{path}" if public else request.build_absolute_uri(path)


def _failed(request: HttpRequest, message: str, status: int = 400) -> HttpResponse:
    return render(request, "staff_auth/sso_error.html", {"message": message}, status=status)


@require_GET
@never_cache
def sso_start(request: HttpRequest) -> HttpResponse:
    if not oidc.configured():
        raise Http404("single sign-on is not configured")
    next_url = request.GET.get("next", "")
    if not url_has_allowed_host_and_scheme(next_url, {request.get_host()}, require_https=request.is_secure()):
        next_url = ""
    attempt = services.sign_in_start(next_url=next_url)
    try:
        url = oidc.authorization_url(
            redirect_uri=_redirect_uri(request),
            state=attempt.state,
            nonce=attempt.nonce,
            code_verifier=attempt.code_verifier,
        )
    except oidc.SsoError as exc:
        return _failed(request, str(exc), status=502)
    request.session[SESSION_STATE] = attempt.state
    return HttpResponseRedirect(url)


@require_GET
@never_cache
def sso_callback(request: HttpRequest) -> HttpResponse:
    if not oidc.configured():
        raise Http404("single sign-on is not configured")
    state = request.GET.get("state", "")
    if not state or request.session.get(SESSION_STATE) != state:
        return _failed(request, "This sign-in was not started in this browser. Start again.")
    try:
        attempt = services.sign_in_consume(state=state)
        if "error" in request.GET:
            detail = " ".join(filter(None, (request.GET["error"], request.GET.get("error_description", ""))))
            return _failed(request, f"The sign-in provider refused the sign-in ({detail}).", status=403)
        # RFC 9207: a provider that names itself must be ours (mix-up defence).
        if "iss" in request.GET and request.GET["iss"] != settings.TOOLBAY_SSO_ISSUER:
            return _failed(request, "The answer came from another sign-in provider.")
        id_token = oidc.exchange_code(
            code=request.GET.get("code", ""), redirect_uri=_redirect_uri(request), code_verifier=attempt.code_verifier
        )
        claims = oidc.verify_id_token(id_token, nonce=attempt.nonce)
        user = services.staff_sign_in(issuer=settings.TOOLBAY_SSO_ISSUER, claims=claims)
    except oidc.SsoError as exc:
        return _failed(request, str(exc), status=403)
    request.session.pop(SESSION_STATE, None)
    login(request, user, backend=BACKEND)
    return redirect(attempt.next_url or "staff_auth:landing")


@login_required(login_url=reverse_lazy("console:login"))
def landing(request: HttpRequest) -> HttpResponse:
    """Where sign-in without ``next`` ends: the admin for staff, the console for operators,
    else the page listing the applications the user authorized."""
    scope = tenant_scope(request)
    if scope.staff:
        return redirect("admin:index")
    if scope.tenant_ids(Role.OPERATOR, include_inactive=True):
        return redirect("console:dashboard")
    return redirect("oauth:authorizations")
