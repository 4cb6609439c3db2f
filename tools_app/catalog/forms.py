"""Admin forms for tools, resources, resource templates, prompts and access rules."""

from __future__ import annotations

import copy
import json
from typing import Any, ClassVar, cast

from django import forms
from django.conf import settings
from django.core.exceptions import ValidationError
from django.forms.fields import InvalidJSONInput, JSONString

from mcp_platform.mcp.text import unstorable
from tenants.forms import NameListField, ScopeListField
from tools_app.catalog.backend_kinds import config_choices
from tools_app.catalog.models import AccessRule, Prompt, Resource, ResourceTemplate, Tool
from tools_app.catalog.services import tool_check_platform_rules

JSON_TEXTAREA_ATTRS = {
    "rows": 12,
    "cols": 90,
    "spellcheck": "false",
    "style": "font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; white-space: pre;",
}


class PrettyJSONField(forms.JSONField):
    """JSON edited as indented text; a parse error says where it is.

    ``empty`` is what a blank box means (None, [] or {}).
    """

    def __init__(self, *, empty: Any = None, rows: int = 12, **kwargs: Any) -> None:
        self.empty = empty
        kwargs.setdefault("widget", forms.Textarea(attrs={**JSON_TEXTAREA_ATTRS, "rows": rows}))
        super().__init__(**kwargs)

    def to_python(self, value: Any) -> Any:
        if self.disabled:
            return value
        if value in self.empty_values:
            return copy.deepcopy(self.empty)
        if isinstance(value, list | dict | int | float | JSONString):
            return value
        try:
            converted = json.loads(value, cls=self.decoder)
        except json.JSONDecodeError as exc:
            raise ValidationError(
                "This is not valid JSON: %(problem)s at line %(line)d, column %(column)d.",
                code="invalid",
                params={"problem": exc.msg, "line": exc.lineno, "column": exc.colno},
            ) from None
        if unstorable(converted):
            raise ValidationError(
                "Text in this JSON may not contain NUL (\\u0000) or unpaired surrogate characters.",
                code="invalid",
            )
        return JSONString(converted) if isinstance(converted, str) else converted

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, InvalidJSONInput):
            return value
        if value is None and self.empty is None:
            return ""
        return json.dumps(value, indent=2, ensure_ascii=False, cls=self.encoder)


def handler_names() -> list[str]:
    """The python backend's registered handlers (it registers them with the catalog)."""
    return config_choices("python", "handler")


def handler_choices(current: str | None = None) -> list[tuple[str, str]]:
    names = handler_names()
    choices = [("", "---------")] + [(name, name) for name in names]
    if current and current not in names:
        # Keep a handler that is gone visible instead of silently selecting another one.
        choices.append((current, f"{current} (not registered)"))
    return choices


class ToolForm(forms.ModelForm[Tool]):
    """A tool with its JSON fields as pretty-printed text and the python handler as a select."""

    handler = forms.ChoiceField(
        required=False,
        help_text="For the python backend: the registered handler that runs this tool.",
    )
    input_schema = PrettyJSONField(
        label="Input schema",
        help_text='JSON Schema (2020-12 unless "$schema" says otherwise) of the arguments; the root is '
        '{"type": "object", ...}.',
        rows=16,
    )
    output_schema = PrettyJSONField(
        label="Output schema",
        required=False,
        help_text="Optional JSON Schema of the structured result; leave empty for none.",
    )
    icons = PrettyJSONField(
        required=False, empty=[], rows=4, help_text='A list like [{"src": "https://…", "mimeType": "image/png"}].'
    )
    tags = PrettyJSONField(
        required=False, empty=[], rows=3, help_text='Labels access rules can match with tag:<label>, e.g. ["demo"].'
    )
    backend_config = PrettyJSONField(
        label="Backend settings",
        required=False,
        empty={},
        rows=4,
        help_text="Further settings of the backend as a JSON object. For the python backend the handler "
        "comes from the select above.",
    )

    # Set by the admin for tenant admins: they may not rename or move a tool platform rules target.
    check_platform_rules: ClassVar[bool] = False

    class Meta:
        model = Tool
        fields = "__all__"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        config = self.initial.get("backend_config")
        current = config.get("handler") if isinstance(config, dict) else None
        if "handler" in self.fields:
            cast(forms.ChoiceField, self.fields["handler"]).choices = handler_choices(
                current if isinstance(current, str) else None
            )
            if isinstance(current, str):
                self.initial.setdefault("handler", current)
        if isinstance(config, dict) and "handler" in config and "backend_config" in self.fields:
            self.initial["backend_config"] = {k: v for k, v in config.items() if k != "handler"}

    def clean_handler(self) -> str:
        name: str = self.cleaned_data.get("handler", "")
        if name and name not in handler_names():
            raise ValidationError(
                "The handler %(name)r is not registered in this deployment; choose another one.",
                code="unregistered",
                params={"name": name},
            )
        return name

    def clean(self) -> dict[str, Any]:
        super().clean()
        cleaned = self.cleaned_data
        self._check_name_is_free(cleaned)
        if self.check_platform_rules:
            changes: dict[str, Any] = {field: cleaned[field] for field in ("name", "tenant") if field in cleaned}
            try:
                tool_check_platform_rules(tool=self.instance, changes=changes)
            except ValidationError as exc:
                self.add_error(None, exc)
        config = cleaned.get("backend_config")
        if cleaned.get("backend_kind") == Tool.Backend.PYTHON and isinstance(config, dict):
            handler = cleaned.get("handler")
            if handler:
                cleaned["backend_config"] = {**config, "handler": handler}
            elif not self.has_error("handler"):
                self.add_error("handler", "Choose the handler that runs this tool.")
        return cleaned

    def _check_name_is_free(self, cleaned: dict[str, Any]) -> None:
        # The database constraints say the same, but their generic message names the
        # constraint; this one says which catalog the name clashes in.
        name, tenant = cleaned.get("name"), cleaned.get("tenant")
        if not name or self.has_error("tenant"):
            return
        clashes = Tool.objects.filter(name=name, tenant=tenant).exclude(pk=self.instance.pk)
        if clashes.exists():
            if tenant is None:
                self.add_error("name", f"A platform tool named {name!r} already exists.")
            else:
                self.add_error("name", f"{tenant} already has a private tool named {name!r}.")

    def _update_errors(self, errors: ValidationError) -> None:
        # Without a usable handler the model also complains about backend_config; the
        # handler select already says it, once is enough.
        if self.has_error("handler") and hasattr(errors, "error_dict"):
            errors.error_dict.pop("backend_config", None)
            if not errors.error_dict:
                return
        super()._update_errors(errors)  # type: ignore[misc]


class AccessRuleForm(forms.ModelForm[AccessRule]):
    """``owned_by_tenant`` is set by the admin for tenant admins: their rules are owned by
    (and apply to) the tenant they pick, and the model's checks for tenant-owned rules apply.
    """

    owned_by_tenant: ClassVar[bool] = False

    scopes = ScopeListField(
        help_text="Narrow the rule to credentials holding any of these scopes (API key scopes or OAuth token "
        "scopes; spaces or commas)."
    )
    oauth_subjects = NameListField(
        help_text="Narrow the rule to OAuth callers with one of these subjects (the subject claim; spaces or commas)."
    )
    oauth_groups = NameListField(
        help_text="Narrow the rule to OAuth callers in one of these groups (the groups or roles claim)."
    )

    class Meta:
        model = AccessRule
        fields = "__all__"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if "kind" in self.fields:
            self.fields["kind"].required = False  # left out (older scripts, a rule on one tool): tools

    def clean_kind(self) -> str:
        return self.cleaned_data.get("kind") or AccessRule.Kind.TOOL

    def clean(self) -> dict[str, Any]:
        super().clean()
        cleaned = self.cleaned_data
        tenant = cleaned.get("tenant")
        if self.owned_by_tenant:
            # Before the model's clean() runs, so its owner checks see the owner.
            self.instance.owner = tenant
        keys = cleaned.get("api_keys")
        if tenant is not None and keys:
            strangers = sorted(key.name for key in keys if key.tenant_id != tenant.pk)
            if strangers:
                self.add_error("api_keys", f"These keys belong to another tenant: {', '.join(strangers)}.")
        return cleaned


def _json(label: str, *, empty: Any, rows: int, help_text: str, required: bool = False) -> PrettyJSONField:
    return PrettyJSONField(label=label, required=required, empty=empty, rows=rows, help_text=help_text)


class _EntryForm(forms.ModelForm[Any]):
    icons = _json("Icons", empty=[], rows=3, help_text='A list like [{"src": "https://…", "mimeType": "image/png"}].')
    tags = _json("Tags", empty=[], rows=2, help_text='Labels access rules can match with tag:<label>, e.g. ["docs"].')
    backend_config = _json(
        "Backend settings",
        empty={},
        rows=4,
        help_text='For the python backend {"handler": "<registered name>"} (optionally "complete": a completion '
        "handler); for HTTP the same settings as an HTTP tool; upstream entries are written by the import.",
    )


class _AnnotatedForm(_EntryForm):
    audience = _json("Audience", empty=[], rows=1, help_text='["user"], ["assistant"], both, or empty.')


class ResourceForm(_AnnotatedForm):
    """A resource: its text in a box, binary content as an upload (kept until replaced or cleared)."""

    upload = forms.FileField(
        required=False,
        label="Binary content",
        help_text="Upload a file to serve it as the resource's content (a base64 blob); up to "
        "TOOLBAY_RESOURCE_MAX_BYTES.",
    )
    clear_blob = forms.BooleanField(required=False, label="Remove the binary content (serve the text instead)")

    class Meta:
        model = Resource
        exclude = ["blob"]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        upload = cleaned.get("upload")
        if upload is not None:
            limit = settings.TOOLBAY_RESOURCE_MAX_BYTES
            if upload.size > limit:
                self.add_error("upload", f"The file has {upload.size} bytes; the limit is {limit}.")
            else:
                self.instance.blob = upload.read()
        elif cleaned.get("clear_blob"):
            self.instance.blob = None
        return cleaned


class ResourceTemplateForm(_AnnotatedForm):
    completions = _json("Completions", empty={}, rows=4, help_text='Values offered per variable: {"id": ["1", "2"]}.')

    class Meta:
        model = ResourceTemplate
        fields = "__all__"


class PromptForm(_EntryForm):
    arguments = _json(
        "Arguments",
        empty=[],
        rows=6,
        help_text='[{"name": "topic", "description": "…", "required": true}, …]; "title" is optional too.',
    )
    messages = _json(
        "Messages",
        empty=[],
        rows=12,
        help_text='[{"role": "user", "content": {"type": "text", "text": "Explain {{topic}}."}}, …]. Text is '
        "Mustache: {{name}} inserts an argument, {{#name}}…{{/name}} shows a part only when it is given.",
    )
    completions = _json("Completions", empty={}, rows=4, help_text='Values offered per argument: {"topic": ["…"]}.')

    class Meta:
        model = Prompt
        fields = "__all__"
