"""How the token authentication appears in the OpenAPI schema."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class AccessTokenScheme(OpenApiAuthenticationExtension):
    target_class = "api.authentication.AccessTokenAuthentication"
    name = "accessToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A personal access token (tbp_…): create one at /api/v1/tokens/ or with "
            "`manage.py create_access_token`.",
        }


ERROR_DETAIL = {
    "type": "object",
    "description": "What went wrong, for a human.",
    "properties": {"detail": {"type": "string"}},
    "required": ["detail"],
}
VALIDATION_ERRORS = {
    "type": "object",
    "description": "Problems by field name (non_field_errors for the object as a whole); each value is a list "
    "of messages, or for nested fields an object of the same shape.",
    "additionalProperties": {},
}

_ERRORS = {
    "400": ("Invalid input; the body names each field and what is wrong with it.", "ValidationErrors"),
    "401": ("No credentials, or a token that is invalid, expired or revoked.", "ErrorDetail"),
    "403": ("Authenticated, but the role in this tenant does not allow it.", "ErrorDetail"),
    "404": ("No such object, or one outside the caller's tenants (the two look the same).", "ErrorDetail"),
    "406": ("The Accept header asks for a format the API cannot answer in.", "ErrorDetail"),
}
_WRITE_ERRORS = {
    "409": ("Conflicts with a change made at the same time; retry.", "ErrorDetail"),
    "415": ("The body's Content-Type is not one the API reads (JSON, form or multipart).", "ErrorDetail"),
}


def add_error_responses(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """drf-spectacular post-processing hook: document the error answers every operation can give."""
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas["ErrorDetail"] = ERROR_DETAIL
    schemas["ValidationErrors"] = VALIDATION_ERRORS
    for path_item in result.get("paths", {}).values():
        for method, operation in path_item.items():
            if method not in ("get", "post", "put", "patch", "delete"):
                continue
            errors = dict(_ERRORS) if method == "get" else {**_ERRORS, **_WRITE_ERRORS}
            responses = operation.setdefault("responses", {})
            for code, (description, component) in errors.items():
                responses.setdefault(
                    code,
                    {
                        "description": description,
                        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{component}"}}},
                    },
                )
    return result
