"""Fields the v1 serializers share: JSON values PostgreSQL can store, scope lists, and
relations (tenant, user) chosen among what the caller may see."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import QuerySet
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from tenants.models import SCOPE_VALIDATOR, Tenant
from tenants.scope import TenantScope, tenant_scope
from tenants.selectors import tenants_in


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(item) for item in value)
    return False


def json_object(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object; else the 400 that says what it is."""
    if not isinstance(value, dict):
        raise serializers.ValidationError(f"Expected a JSON object, got {type(value).__name__}.")
    return value


class JsonValueField(serializers.JSONField):
    """Any JSON value, except strings with NUL characters (PostgreSQL cannot store them)."""

    def to_internal_value(self, data: Any) -> Any:
        value = super().to_internal_value(data)
        if _has_nul(value):
            raise serializers.ValidationError("Strings in this JSON may not contain NUL (\\u0000) characters.")
        return value


@extend_schema_field(OpenApiTypes.OBJECT)
class JsonObjectField(JsonValueField):
    """A JSON object (a schema, a backend configuration, tool arguments)."""

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        return json_object(super().to_internal_value(data))


class StringListField(serializers.ListField):
    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("child", serializers.CharField(max_length=200))
        kwargs.setdefault("required", False)
        super().__init__(**kwargs)


class ScopeListField(StringListField):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(child=serializers.CharField(max_length=64, validators=[SCOPE_VALIDATOR]), **kwargs)


def request_scope(serializer: serializers.Field | serializers.BaseSerializer) -> TenantScope:
    return tenant_scope(serializer.context["request"])


@extend_schema_field(OpenApiTypes.STR)
class TenantField(serializers.SlugRelatedField):
    """A tenant named by its slug, among the caller's tenants (others look missing)."""

    default_error_messages = {"does_not_exist": "There is no tenant with the slug {value!r}."}

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(slug_field="slug", **kwargs)

    def get_queryset(self) -> QuerySet[Tenant]:
        return tenants_in(request_scope(self))

    def to_internal_value(self, data: Any) -> Tenant:
        if not isinstance(data, str) or "\x00" in data:  # PostgreSQL cannot even compare NULs
            self.fail("invalid")
        return super().to_internal_value(data)  # type: ignore[no-any-return]


@extend_schema_field(OpenApiTypes.STR)
class UsernameField(serializers.SlugRelatedField):
    default_error_messages = {"does_not_exist": "There is no user with the username {value!r}."}

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(slug_field="username", queryset=get_user_model().objects.all(), **kwargs)

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, str) or "\x00" in data:
            self.fail("invalid")
        return super().to_internal_value(data)


class CreatedByField(serializers.SlugRelatedField):
    """The username of whoever made the object; null when made by a command or the user is gone."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("help_text", "Username of whoever made it; null for commands and deleted users.")
        super().__init__(slug_field="username", read_only=True, allow_null=True, **kwargs)


def credential_status(revoked_at: Any, expires_at: Any) -> str:
    if revoked_at is not None:
        return "revoked"
    if expires_at is not None and expires_at <= timezone.now():
        return "expired"
    return "active"


STATUS_CHOICES = ["active", "expired", "revoked"]
