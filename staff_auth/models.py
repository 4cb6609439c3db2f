"""Sign-in lockouts, the SSO identities linked to users, the memberships SSO granted, and the
SSO sign-ins under way (one row per authorization request, consumed once)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from tenants.models import Membership


class SignInLockout(models.Model):
    """An address or an account refused password sign-in until ``locked_until``. Deleting the
    row (admin) lifts it early."""

    class Kind(models.TextChoices):
        ADDRESS = "address", "Client address"
        ACCOUNT = "account", "Account (username as typed)"

    kind = models.CharField(max_length=16, choices=Kind.choices)
    key = models.CharField(max_length=150)
    failures = models.PositiveIntegerField(help_text="Failed sign-ins that caused the lockout.")
    locked_until = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["kind", "key", "locked_until"], name="signin_lockout_lookup")]
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} {self.key} until {self.locked_until:%Y-%m-%d %H:%M:%S}"


class StaffIdentity(models.Model):
    """The provider's subject a user signs in as. ``granted_staff`` / ``granted_superuser`` say
    whether SSO set those flags (and so may take them back); flags set by hand stay."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="staff_identity")
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    groups = models.JSONField(default=list, blank=True, help_text="Groups at the last sign-in.")
    granted_staff = models.BooleanField(default=False)
    granted_superuser = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_sign_in_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="staff_identity_unique_subject")]
        verbose_name_plural = "staff identities"

    def __str__(self) -> str:
        return f"{self.subject} @ {self.issuer}"


class SsoMembership(models.Model):
    """Marks a membership SSO created: the next sign-in changes or removes it as the groups say.
    Memberships without this mark were made by hand and SSO leaves them alone."""

    membership = models.OneToOneField(Membership, on_delete=models.CASCADE, related_name="sso_grant")
    identity = models.ForeignKey(StaffIdentity, on_delete=models.CASCADE, related_name="memberships")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"SSO: {self.membership}"


class SsoSignIn(models.Model):
    """One authorization request sent to the provider. Its callback is honoured once: the
    conditional update that sets ``used_at`` decides which of two concurrent callbacks wins."""

    state = models.CharField(max_length=64, unique=True)
    nonce = models.CharField(max_length=64)
    code_verifier = models.CharField(max_length=128)
    next_url = models.CharField(max_length=2000, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"SSO sign-in {self.state[:8]}…"
