"""Indexes for the operator console: the key filter, and trigram indexes for its search
on PostgreSQL (SQLite scans instead).

``icontains`` compiles to ``UPPER(col::text) LIKE UPPER('%term%')`` on PostgreSQL, which
a GIN index over ``UPPER(col) gin_trgm_ops`` answers for terms of three characters or
more. Built CONCURRENTLY (outside a transaction) so a large table keeps taking the
call path's inserts while they build. pg_trgm is a trusted extension (PostgreSQL 13+):
the database owner may create it.
"""

from django.db import migrations, models

INDEXES = {
    "invocation_tool_trgm": "UPPER(tool_name) gin_trgm_ops",
    "invocation_error_trgm": "UPPER(error_message) gin_trgm_ops",
}


def create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    for name, expression in INDEXES.items():
        schema_editor.execute(
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON audit_invocation USING gin ({expression})"
        )


def drop(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for name in INDEXES:
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("audit", "0001_audit_log")]

    operations = [
        migrations.AddIndex(
            model_name="invocation",
            index=models.Index(fields=["tenant", "key_id", "-started_at"], name="invocation_tenant_key"),
        ),
        migrations.RunPython(create, drop, elidable=False),
    ]
