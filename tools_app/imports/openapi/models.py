"""What an OpenAPI import keeps: the document as given (with its hash), and for each tool it
made the operation it came from and the definition the document gave it, so a re-import can
say what changed (and curation and pinned definitions can build on the source's version)."""

from __future__ import annotations

from django.db import models

from tools_app.backends.models import NAME_VALIDATOR
from tools_app.catalog.models import Tool, optional_tenant, unique_per_catalog


class OpenApiSource(models.Model):
    """One imported API description in a catalog (platform or one tenant's)."""

    tenant = optional_tenant(
        related_name="openapi_sources", help_text="Empty: its tools are platform tools. Set: private to that tenant."
    )
    name = models.CharField(
        max_length=100, validators=[NAME_VALIDATOR], help_text="Tags its tools openapi:<name>; names its secrets."
    )
    title = models.CharField(max_length=200, blank=True)
    location = models.CharField(max_length=2048, blank=True, help_text="The URL or file it was read from.")
    document = models.TextField(help_text="The document as it was given at the last import.")
    sha256 = models.CharField(max_length=64)
    options = models.JSONField(default=dict, blank=True, help_text="Prefix, base URL and selection of the import.")
    imported_at = models.DateTimeField()
    auto_approve = models.BooleanField(
        default=False,
        help_text="Trust this source: a re-import that changes a tool's definition applies it at once. Off: the "
        "change waits for an admin's approval unless the import is run with approve (--approve).",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name", "id"]
        constraints = unique_per_catalog("name")

    def __str__(self) -> str:
        return self.name if self.tenant_id is None else f"{self.name} (tenant #{self.tenant_id})"


class OpenApiOperation(models.Model):
    """A tool made from one operation of a source."""

    source = models.ForeignKey(OpenApiSource, on_delete=models.CASCADE, related_name="operations")
    tool = models.OneToOneField(Tool, on_delete=models.CASCADE, related_name="openapi_operation")
    operation = models.CharField(max_length=1000, help_text='The method and path, e.g. "GET /pets/{id}".')
    operation_id = models.CharField(max_length=500, blank=True)
    # A hash, not a copy: the kept document and ``source_definition`` give the definition again,
    # and a copy of every schema doubled the writes of a large import.
    definition_sha256 = models.CharField(
        max_length=64, help_text="Hash of the tool's fields as the document defined them at the last import."
    )
    source_definition = models.JSONField(help_text="The operation as the document has it.")

    class Meta:
        ordering = ["source", "operation"]
        constraints = [models.UniqueConstraint(fields=["source", "operation"], name="openapioperation_unique")]

    def __str__(self) -> str:
        return self.operation
