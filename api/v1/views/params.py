"""Query-string parameters of the list endpoints: how a view reads one (a bad value answers
400 naming the parameter) and how the OpenAPI schema declares it."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request

TENANT_PARAM = OpenApiParameter("tenant", OpenApiTypes.STR, description="Only objects of the tenant with this slug.")


def bool_param(name: str, description: str) -> OpenApiParameter:
    return OpenApiParameter(name, OpenApiTypes.BOOL, description=description)


def query_bool(request: Request, name: str) -> bool | None:
    raw = request.query_params.get(name)
    if raw is None:
        return None
    if raw.lower() in ("true", "1"):
        return True
    if raw.lower() in ("false", "0"):
        return False
    raise ValidationError({name: ["Use true or false."]})


def query_int(request: Request, name: str) -> int | None:
    raw = request.query_params.get(name)
    if raw is None:
        return None
    if not raw.isascii() or not raw.isdigit() or len(raw) > 18:
        raise ValidationError({name: ["Use an id (a whole number)."]})
    return int(raw)


def query_str(request: Request, name: str) -> str | None:
    raw = request.query_params.get(name)
    if raw is not None and "\x00" in raw:
        raise ValidationError({name: ["NUL characters are not allowed."]})
    return raw
