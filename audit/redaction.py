"""Redaction of sensitive values before anything is written to the audit log."""

from __future__ import annotations

from typing import Any

REDACTED = "[redacted]"
# Model fields whose values never appear in a change diff.
SECRET_FIELD_MARKERS = ("secret", "password", "token", "key_hash", "ciphertext", "encrypted", "credential")


def _sensitive(schema: dict[str, Any]) -> bool:
    return schema.get("x-sensitive") is True or schema.get("writeOnly") is True


def redact_arguments(value: Any, schema: Any) -> Any:
    """A copy of ``value`` with every field its schema marks ``x-sensitive`` or ``writeOnly``
    replaced by "[redacted]", through nested objects and arrays."""
    if not isinstance(schema, dict):
        return value
    if _sensitive(schema):
        return REDACTED
    if isinstance(value, dict):
        properties = schema.get("properties")
        if not isinstance(properties, dict):
            properties = {}
        return {key: redact_arguments(item, properties.get(key)) for key, item in value.items()}
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [redact_arguments(item, schema["items"]) for item in value]
    return value


def marks_sensitive(schema: Any) -> bool:
    """Whether ``redact_arguments`` could redact anything under ``schema``: some subschema
    says ``x-sensitive`` or ``writeOnly``. When none does, the arguments go to the audit row
    as they are, without the copy."""
    if isinstance(schema, dict):
        return _sensitive(schema) or any(marks_sensitive(value) for value in schema.values())
    if isinstance(schema, list):
        return any(marks_sensitive(item) for item in schema)
    return False


def is_secret_field(name: str) -> bool:
    lowered = name.lower()
    return any(marker in lowered for marker in SECRET_FIELD_MARKERS)
