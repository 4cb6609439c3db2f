"""Password sign-in is throttled per address and per account (state in the database and
Redis, so every process sees it), with a clear message and an audit event; sign-in without
``next`` lands on a real page."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client

from audit.models import AuditEvent
from staff_auth.models import SignInLockout
from tenants.models import Membership
from tenants.services import membership_set
from tests.poll import wait_for

pytestmark = pytest.mark.django_db

CONSOLE_LOGIN = "/console/login/"


@pytest.fixture
def operator(acme: Any) -> Any:
    user = get_user_model().objects.create_user("olga", password="right-password")
    membership_set(tenant=acme, user=user, role=Membership.Role.OPERATOR)
    return user


def _sign_in(client: Client, password: str, address: str = "127.0.0.1", path: str = CONSOLE_LOGIN) -> Any:
    return client.post(path, {"username": "olga", "password": password}, REMOTE_ADDR=address)


def _signed_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def test_twelve_wrong_passwords_then_the_right_one_is_refused(operator: Any) -> None:
    client = Client()
    for _ in range(12):
        assert _sign_in(client, "wrong").status_code == 200
    refused = _sign_in(client, "right-password")
    assert refused.status_code == 200
    assert "Too many failed sign-ins from this address" in refused.content.decode()
    assert not _signed_in(client)

    lockout = SignInLockout.objects.get()
    assert (lockout.kind, lockout.key, lockout.failures) == ("address", "127.0.0.1", 10)
    event = AuditEvent.objects.get(object_type="staff_auth.SignInLockout")
    assert event.action == "created" and event.changes["key"] == [None, "127.0.0.1"]

    # The account itself is not locked: from another address the right password works.
    other = Client()
    assert _sign_in(other, "right-password", address="192.0.2.7").status_code == 302
    assert _signed_in(other)


# Another process (another web server) failing sign-ins for the same address and account.
FAIL_ELSEWHERE = """
import django
django.setup()
from django.contrib.auth import authenticate
from django.test import RequestFactory
request = RequestFactory().post("/console/login/", REMOTE_ADDR="127.0.0.1")
for _ in range(4):
    assert authenticate(request, username="olga", password="wrong") is None
"""


@pytest.mark.django_db(transaction=True)
def test_failures_in_other_processes_count_too(operator: Any) -> None:
    client = Client()
    for _ in range(6):
        _sign_in(client, "wrong")
    db = connection.settings_dict
    database_url = f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "TOOLBAY_TEST_DATABASE_URL": database_url,
        "TOOLBAY_TEST_REDIS_URL": django_settings.REDIS_URL,
    }
    subprocess.run([sys.executable, "-c", FAIL_ELSEWHERE], env=env, check=True, timeout=60)
    # Six failures here and four there: the address's tenth.
    assert "Too many failed sign-ins from this address" in _sign_in(client, "right-password").content.decode()


def test_the_admin_sign_in_page_says_so_too(operator: Any) -> None:
    client = Client()
    for _ in range(10):
        _sign_in(client, "wrong", path="/admin/login/")
    page = _sign_in(client, "right-password", path="/admin/login/").content.decode()
    assert "Too many failed sign-ins from this address" in page


def test_sign_in_works_again_after_the_cool_off(operator: Any, settings: Any) -> None:
    settings.TOOLBAY_LOGIN_COOLOFF_SECONDS = 1
    client = Client()
    for _ in range(12):
        _sign_in(client, "wrong")
    assert "Too many failed" in _sign_in(client, "right-password").content.decode()
    wait_for(lambda: _sign_in(client, "right-password").status_code == 302, timeout=5, message="still locked out")
    assert _signed_in(client)


def test_an_account_guessed_from_many_addresses_is_locked_everywhere(operator: Any, settings: Any) -> None:
    settings.TOOLBAY_LOGIN_MAX_FAILURES_PER_ACCOUNT = 5
    for n in range(5):
        _sign_in(Client(), "wrong", address=f"198.51.100.{n}")
    refused = _sign_in(Client(), "right-password", address="203.0.113.9")
    assert "Too many failed sign-ins for this account" in refused.content.decode()
    assert SignInLockout.objects.get().kind == "account"
    # Deleting the lockout (the admin's way to let someone in early) lifts it.
    SignInLockout.objects.all().delete()
    assert _sign_in(Client(), "right-password", address="203.0.113.9").status_code == 302


def test_password_sign_in_off_except_for_the_break_glass_account(operator: Any, settings: Any) -> None:
    settings.TOOLBAY_SSO_PASSWORD_LOGIN = False
    settings.TOOLBAY_SSO_BREAK_GLASS_USERNAME = "root"
    get_user_model().objects.create_superuser("root", password="glass-password")
    refused = _sign_in(Client(), "right-password")
    assert "Password sign-in is turned off" in refused.content.decode()
    client = Client()
    answer = client.post("/admin/login/", {"username": "root", "password": "glass-password"})
    assert answer.status_code == 302 and _signed_in(client)


@pytest.mark.parametrize(
    ("staff", "role", "lands_on"),
    [
        (True, Membership.Role.ADMIN, "/admin/"),
        (False, Membership.Role.OPERATOR, "/console/"),
        (False, Membership.Role.VIEWER, "/oauth/authorizations/"),
    ],
)
def test_sign_in_without_next_lands_on_a_real_page(acme: Any, staff: bool, role: str, lands_on: str) -> None:
    """The OAuth sign-in page (and any LoginView without a default of its own) used to send
    the user to /accounts/profile/, a 404."""
    user = get_user_model().objects.create_user("pat", password="pw-pw-pw-pw", is_staff=staff)
    membership_set(tenant=acme, user=user, role=role)
    answer = Client().post("/oauth/login/", {"username": "pat", "password": "pw-pw-pw-pw"}, follow=True)
    assert [url for url, _status in answer.redirect_chain] == ["/staff/", lands_on]
    assert answer.status_code == 200
