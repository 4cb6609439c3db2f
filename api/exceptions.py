"""Errors as API answers: a domain ValidationError names its fields like a serializer's."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError
from rest_framework import status
from rest_framework.exceptions import APIException, ValidationError
from rest_framework.response import Response
from rest_framework.serializers import as_serializer_error
from rest_framework.views import exception_handler as drf_exception_handler


class Conflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "This change conflicts with another one made at the same time; read the object again and retry."
    default_code = "conflict"


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, DjangoValidationError):
        # Services raise Django's ValidationError; answer it exactly like a serializer's.
        exc = ValidationError(detail=as_serializer_error(exc))
    elif isinstance(exc, IntegrityError):
        # Services check uniqueness first; only a concurrent write gets this far.
        exc = Conflict()
    return drf_exception_handler(exc, context)
