"""Admin forms for tenants and credentials."""

from __future__ import annotations

import re
from typing import Any, ClassVar

from django import forms
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.utils import timezone

from tenants.models import SCOPE_VALIDATOR, ApiKey, Membership


class ScopeListField(forms.CharField):
    """Scopes typed as words separated by spaces or commas; cleaned to a list of strings."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        kwargs.setdefault("widget", forms.TextInput(attrs={"size": 60}))
        kwargs.setdefault("help_text", "Separated by spaces or commas, e.g. tools:read tools:call")
        super().__init__(**kwargs)

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, list | tuple):
            return " ".join(str(item) for item in value)
        return value

    def to_python(self, value: Any) -> list[str]:  # type: ignore[override]
        if isinstance(value, list | tuple):
            return [str(item) for item in value]
        text = super().to_python(value) or ""
        # dict.fromkeys: drop repeats, keep the order the admin typed.
        return list(dict.fromkeys(word for word in re.split(r"[\s,]+", text) if word))

    def validate(self, value: Any) -> None:
        if self.required and not value:
            raise ValidationError(self.error_messages["required"], code="required")
        for scope in value:
            try:
                SCOPE_VALIDATOR(scope)
            except ValidationError:
                raise ValidationError(
                    "%(scope)r is not a valid scope: scopes are 1-64 characters of A-Z a-z 0-9 _ . : -",
                    code="invalid",
                    params={"scope": scope},
                ) from None


class NameListField(ScopeListField):
    """OAuth subjects or group names, separated by spaces or commas (any characters else)."""

    def validate(self, value: Any) -> None:
        if self.required and not value:
            raise ValidationError(self.error_messages["required"], code="required")
        for name in value:
            if len(name) > 255:
                raise ValidationError("%(name)r is longer than 255 characters", code="invalid", params={"name": name})


class ApiKeyAddForm(forms.ModelForm[ApiKey]):
    """The fields an admin chooses; the key material comes from ``api_key_create``."""

    scopes = ScopeListField()

    class Meta:
        model = ApiKey
        fields = ["tenant", "name", "scopes", "expires_at", "tool_listing"]

    def clean_expires_at(self) -> Any:
        expires_at = self.cleaned_data.get("expires_at")
        if expires_at is not None and expires_at <= timezone.now():
            raise ValidationError("The expiry must be in the future.")
        return expires_at


class ApiKeyChangeForm(forms.ModelForm[ApiKey]):
    scopes = ScopeListField()

    class Meta:
        model = ApiKey
        fields = ["name", "scopes", "expires_at", "tool_listing"]


class MembershipForm(forms.ModelForm[Membership]):
    """A user is picked by username: the admin never lists the platform's users to a tenant admin.

    ``owner_tenant_ids`` is set by the admin: None for platform admins (no restriction),
    otherwise the tenants where the signed-in user is an owner; only owners hand out the
    owner role.
    """

    owner_tenant_ids: ClassVar[frozenset[int] | None] = None

    user = forms.ModelChoiceField(
        queryset=get_user_model().objects.all(),
        to_field_name="username",
        widget=forms.TextInput(attrs={"autocomplete": "off"}),
        label="Username",
        error_messages={"invalid_choice": "There is no user with this username."},
    )

    class Meta:
        model = Membership
        fields = ["user", "tenant", "role"]

    def clean(self) -> dict[str, Any]:
        super().clean()
        cleaned = self.cleaned_data
        tenant = cleaned.get("tenant") or (self.instance.tenant if self.instance.tenant_id else None)
        if (
            self.owner_tenant_ids is not None
            and cleaned.get("role") == Membership.Role.OWNER
            and tenant is not None
            and tenant.pk not in self.owner_tenant_ids
        ):
            self.add_error("role", "Only an owner of this tenant can make someone an owner.")
        return cleaned
