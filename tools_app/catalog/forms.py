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
from tools_app.catalog.models import AccessRule, Prompt, Resource, ResourceTemplate, Tool, ToolCuration
from tools_app.catalog.services import (
    CURATION_FIELDS,
    catalog_key_clash,
    tool_check_platform_rules,
    tool_curation_check,
)

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


def handler_names(tenant_ids: frozenset[int] | None = None) -> list[str]:
    """The python backend's handlers the catalogs of ``tenant_ids`` may bind (None: every
    handler, which the platform catalog may bind; the backend registers them with the catalog)."""
    return config_choices("python", "handler", tenant_ids=tenant_ids)


def handler_choices(current: str | None = None, tenant_ids: frozenset[int] | None = None) -> list[tuple[str, str]]:
    names = handler_names(tenant_ids)
    choices = [("", "---------")] + [(name, name) for name in names]
    if current and current not in names:
        # Keep a handler that is gone visible instead of silently selecting another one.
        choices.append((current, f"{current} (not registered)"))
    return choices


def _json(label: str, *, empty: Any, rows: int, help_text: str, required: bool = False) -> PrettyJSONField:
    return PrettyJSONField(label=label, required=required, empty=empty, rows=rows, help_text=help_text)


class CatalogEntryForm(forms.ModelForm[Any]):
    """What the tool, resource, template and prompt forms share: JSON fields edited as text, and
    a name (a resource's URI) that is checked against its catalog."""

    by_tenant_admin: ClassVar[bool] = False  # set by the admin

    icons = _json("Icons", empty=[], rows=3, help_text='A list like [{"src": "https://…", "mimeType": "image/png"}].')
    tags = _json("Tags", empty=[], rows=2, help_text='Labels access rules can match with tag:<label>, e.g. ["docs"].')
    backend_config = _json(
        "Backend settings",
        empty={},
        rows=4,
        help_text='For the python backend {"handler": "<registered name>"} (optionally "complete": a completion '
        "handler); for HTTP the same settings as an HTTP tool; upstream entries are written by the import.",
    )

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        # Before the model's checks: the constraints' message names the constraint, this one the catalog.
        model = self._meta.model
        key = model.catalog_key
        if cleaned.get(key) and not self.has_error("tenant"):
            probe = model(pk=self.instance.pk, tenant=cleaned.get("tenant"), **{key: cleaned[key]})
            clash = catalog_key_clash(probe)
            if clash:
                self.add_error(key, clash)
        return cleaned


class ToolForm(CatalogEntryForm):
    """A tool with its JSON fields as pretty-printed text and the python handler as a select.

    ``handler_tenant_ids`` is set by the admin for tenant admins: the select offers only the
    handlers their tenants' catalogs may bind (the model's check then holds the chosen tenant
    to its own)."""

    handler_tenant_ids: ClassVar[frozenset[int] | None] = None

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
    backend_config = _json(
        "Backend settings",
        empty={},
        rows=4,
        help_text="Further settings of the backend as a JSON object. For the python backend the handler "
        "comes from the select above.",
    )

    class Meta:
        model = Tool
        fields = "__all__"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        config = self.initial.get("backend_config")
        current = config.get("handler") if isinstance(config, dict) else None
        if "handler" in self.fields:
            cast(forms.ChoiceField, self.fields["handler"]).choices = handler_choices(
                current if isinstance(current, str) else None, self.handler_tenant_ids
            )
            if isinstance(current, str):
                self.initial.setdefault("handler", current)
        if isinstance(config, dict) and "handler" in config and "backend_config" in self.fields:
            self.initial["backend_config"] = {k: v for k, v in config.items() if k != "handler"}

    def clean_handler(self) -> str:
        name: str = self.cleaned_data.get("handler", "")
        if name and name not in handler_names(self.handler_tenant_ids):
            raise ValidationError(
                "The handler %(name)r is not registered in this deployment; choose another one.",
                code="unregistered",
                params={"name": name},
            )
        return name

    def clean(self) -> dict[str, Any]:
        super().clean()
        cleaned = self.cleaned_data
        if self.by_tenant_admin:  # they may not rename or move a tool platform rules target
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

    def _update_errors(self, errors: ValidationError) -> None:
        # Without a usable handler the model also complains about backend_config; the
        # handler select already says it, once is enough.
        if self.has_error("handler") and hasattr(errors, "error_dict"):
            errors.error_dict.pop("backend_config", None)
            if not errors.error_dict:
                return
        super()._update_errors(errors)  # type: ignore[misc]


class AccessRuleForm(forms.ModelForm[AccessRule]):
    """For tenant admins (``by_tenant_admin``), rules are owned by (and apply to) the tenant they
    pick, and the model's checks for tenant-owned rules apply.
    """

    by_tenant_admin: ClassVar[bool] = False  # set by the admin

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
        if self.by_tenant_admin:
            # Before the model's clean() runs, so its owner checks see the owner.
            self.instance.owner = tenant
        keys = cleaned.get("api_keys")
        if tenant is not None and keys:
            strangers = sorted(key.name for key in keys if key.tenant_id != tenant.pk)
            if strangers:
                self.add_error("api_keys", f"These keys belong to another tenant: {', '.join(strangers)}.")
        return cleaned


class _AnnotatedForm(CatalogEntryForm):
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


class PromptForm(CatalogEntryForm):
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


class ToolCurationForm(forms.ModelForm[ToolCuration]):
    """The curation on a tool's page, checked against the tool as the same form submits it
    (the formset hands it the tool's edited instance)."""

    arguments = PrettyJSONField(
        label="Argument rules",
        required=False,
        empty={},
        rows=8,
        help_text='Per argument of the source inputSchema, e.g. {"account": {"hidden": true, "value": "acme"}, '
        '"limit": {"default": 20, "maximum": 50}, "status": {"enum": ["open"]}}. Keys: hidden, value (hidden '
        "only), default, enum, minimum, maximum, minLength, maxLength, pattern, title, description. Rules may "
        "only narrow the source (a wider one is refused).",
    )

    class Meta:
        model = ToolCuration
        fields = ("name", "title", "description", "arguments")

    def __init__(self, *args: Any, tool: Tool | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tool = tool  # the tool as this submission edits it (see ToolCurationFormSet)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        tool = self.tool if self.tool is not None else self.instance.tool
        probe = ToolCuration(tool=tool, **{name: cleaned.get(name) for name in CURATION_FIELDS})
        if not probe.is_empty() and not cleaned.get("DELETE"):
            probe.pk = self.instance.pk
            tool_curation_check(probe)
        return cleaned


class ToolCurationFormSet(forms.BaseInlineFormSet[ToolCuration, Tool, forms.ModelForm[ToolCuration]]):
    """Hands each form the tool being edited: the curation is checked against the schema as
    submitted with it, not as it was saved."""

    def get_form_kwargs(self, index: int | None) -> dict[str, Any]:
        return {**super().get_form_kwargs(index), "tool": self.instance}
