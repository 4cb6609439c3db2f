"""The "Test call" page of the tool admin: run a tool once through the real call path."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path

from tools_app.catalog.forms import PrettyJSONField
from tools_app.catalog.models import Tool
from tools_app.catalog.spec import ToolSpec
from tools_app.runs.trial_calls import tool_test_call

PRE_STYLE = (
    "font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; white-space: pre-wrap; "
    "margin: 0; padding: 8px; max-width: 70em; overflow-x: auto;"
)


# --- test calls on any tool ------------------------------------------------------------------


class TestCallForm(forms.Form):
    arguments = PrettyJSONField(
        label="Arguments",
        empty={},
        required=False,
        rows=10,
        help_text="A JSON object, checked against the tool's inputSchema like a client's arguments.",
    )

    def clean_arguments(self) -> dict[str, Any]:
        value = self.cleaned_data["arguments"]
        if not isinstance(value, dict):
            raise ValidationError("The arguments must be a JSON object.")
        return value


def _example_arguments(tool: Tool) -> dict[str, Any]:
    """A starting point for the form: each required property with a placeholder of its type, as
    the published (curated) schema asks a client for them."""
    placeholders = {"string": "", "integer": 0, "number": 0, "boolean": False, "array": [], "object": {}}
    published = ToolSpec.from_model(tool).input_schema
    schema = published if isinstance(published, dict) else {}
    properties = schema.get("properties", {})
    example = {}
    for name in schema.get("required", []):
        prop = properties.get(name, {})
        kind = prop.get("type") if isinstance(prop, dict) else None
        example[name] = prop.get("default", placeholders.get(str(kind))) if isinstance(prop, dict) else None
    return example


class ToolTestCallMixin:
    """Adds the "Test call" page to the tool admin: run the tool through the real path."""

    def get_urls(self) -> list[URLPattern]:
        prefix = f"{self.opts.app_label}_{self.opts.model_name}"  # type: ignore[attr-defined]
        return [
            path(
                "<path:object_id>/test-call/",
                self.admin_site.admin_view(self.test_call_view),  # type: ignore[attr-defined]
                name=f"{prefix}_test_call",
            ),
            *super().get_urls(),  # type: ignore[misc]
        ]

    def test_call_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        tool = self.get_object(request, unquote(object_id))  # type: ignore[attr-defined]
        if tool is None:
            raise Http404("No tool with this id.")
        # A test call runs the tool for real (side effects included): for those who may change it.
        if not self.has_change_permission(request, tool):  # type: ignore[attr-defined]
            raise PermissionDenied
        outcome = None
        if request.method == "POST":
            form = TestCallForm(request.POST)
            if form.is_valid():
                outcome = tool_test_call(tool=tool, arguments=form.cleaned_data["arguments"])
        else:
            form = TestCallForm(initial={"arguments": _example_arguments(tool)})
        context = {
            **self.admin_site.each_context(request),  # type: ignore[attr-defined]
            "opts": self.opts,  # type: ignore[attr-defined]
            "original": tool,
            "title": f"Test call: {tool.name}",
            "form": form,
            "outcome": outcome,
            "result_json": json.dumps(outcome.result, indent=2, ensure_ascii=False) if outcome else "",
            "notifications_json": json.dumps(outcome.notifications, indent=2, ensure_ascii=False) if outcome else "",
            "pre_style": PRE_STYLE,
        }
        return TemplateResponse(request, "admin/tools_app/tool/test_call.html", context)
