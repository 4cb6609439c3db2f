"""What the v1 serializers of tools, resources, resource templates and prompts share: the
catalog (tenant) an entry lives in, its JSON fields, the MCP view, and writes through the
``catalog_entry_*`` services."""

from __future__ import annotations

import copy
from typing import Any, ClassVar

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from api.v1.serializers.fields import JsonObjectField, JsonValueField, StringListField, TenantField, request_scope
from tenants.models import Tenant
from tools_app.catalog import services as catalog_services
from tools_app.catalog.models import CatalogEntry
from tools_app.catalog.spec import EntrySpec

# Each kind's field list: the shared head, its own fields, then these.
ENTRY_FIELDS = ["id", "tenant", "name", "title", "description", "icons", "tags", "enabled"]
BACKEND_FIELDS = ["backend_kind", "backend_config", "timeout_seconds"]
TAIL_FIELDS = ["version", "mcp", "created_at", "updated_at"]


class CatalogEntrySerializer(serializers.ModelSerializer):
    """A kind sets ``Meta.model`` and ``spec`` (whose ``wire`` is the MCP view)."""

    spec: ClassVar[Any]  # the kind's EntrySpec subclass

    tenant = TenantField(
        required=False,
        allow_null=True,
        help_text="The tenant it is private to; null (platform admins only) for the platform catalog. Fixed once "
        "it exists.",
    )
    icons = JsonValueField(required=False, help_text='A list like [{"src": "https://…", "mimeType": "image/png"}].')
    tags = StringListField(help_text="Labels access rules can match with tag:<label>.")
    backend_config = JsonObjectField(required=False, help_text="Settings of the backend.")
    mcp = serializers.SerializerMethodField(help_text="As MCP clients see it in their lists.")

    class Meta:
        model: type[CatalogEntry]  # set by each kind
        validators: list[Any] = []  # catalog_entry_check says which catalog a name clashes in
        read_only_fields = ["id", "version", "created_at", "updated_at"]

    def _what(self) -> str:
        return str(self.Meta.model._meta.verbose_name)

    @extend_schema_field(OpenApiTypes.OBJECT)
    def get_mcp(self, entry: Any) -> dict[str, Any]:
        spec: EntrySpec = self.spec.from_model(entry)
        return spec.wire

    def validate_tenant(self, tenant: Tenant | None) -> Tenant | None:
        what = self._what()
        if self.instance is not None and getattr(tenant, "pk", None) != self.instance.tenant_id:
            raise serializers.ValidationError(f"A {what} cannot move to another catalog; create it there instead.")
        if tenant is None and not request_scope(self).platform:
            raise serializers.ValidationError(
                f"Name the tenant the {what} is private to; only platform admins add platform {what}s."
            )
        return tenant

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if self.instance is None and "tenant" not in attrs:
            try:
                attrs["tenant"] = self.validate_tenant(None)
            except serializers.ValidationError as exc:
                raise serializers.ValidationError({"tenant": exc.detail}) from None
        return attrs

    def unsaved_entry(self) -> CatalogEntry:
        """The entry as it would be saved (for a dry run): a new one, or a changed copy."""
        data = dict(self.validated_data)
        if self.instance is None:
            return self.Meta.model(**data)
        entry: CatalogEntry = copy.copy(self.instance)
        for name, value in data.items():
            setattr(entry, name, value)
        return entry

    def create(self, validated_data: dict[str, Any]) -> CatalogEntry:
        tenant = validated_data.pop("tenant")
        return catalog_services.catalog_entry_create(model=self.Meta.model, tenant=tenant, fields=validated_data)

    def update(self, instance: CatalogEntry, validated_data: dict[str, Any]) -> CatalogEntry:
        validated_data.pop("tenant", None)
        return catalog_services.catalog_entry_update(entry=instance, changes=validated_data)
