"""Fewer index writes per audited call: the audit insert is the database's main per-call load.

- ``call_id``: its uniqueness (what the writer's ``ON CONFLICT (call_id)`` needs) stays as
  it is in the database; only the state calls it a constraint now, which drops the second,
  LIKE-only ``_like`` index that ``unique=True`` adds to a varchar on PostgreSQL.
- ``tenant``: no index of its own; ``tenant_id`` leads the composite indexes.
- The OAuth subject and client indexes, and the trigram index of the error message, become
  partial: most calls (API keys, successes) leave those columns empty, and the console never
  looks for "" (``console.filters`` says ``error_message <> ''`` with its search).

On PostgreSQL the indexes are built and dropped CONCURRENTLY (outside a transaction), so a
large table keeps taking the writer's inserts meanwhile; the new ones are built before the
old ones go, so no filter is ever without its index.
"""

from django.db import migrations, models

TABLE = "audit_invocation"
NEW = {
    "invocation_oauth_subject": ("(tenant_id, oauth_subject, started_at DESC) WHERE NOT (oauth_subject = '')"),
    "invocation_oauth_client": ("(tenant_id, oauth_client, started_at DESC) WHERE NOT (oauth_client = '')"),
    "invocation_error_text_trgm": "USING gin (UPPER(error_message) gin_trgm_ops) WHERE NOT (error_message = '')",
}
OLD = {
    "invocation_tenant_subject": "(tenant_id, oauth_subject, started_at DESC)",
    "invocation_tenant_client": "(tenant_id, oauth_client, started_at DESC)",
    "invocation_error_trgm": "USING gin (UPPER(error_message) gin_trgm_ops)",
}
# The two of each that Django's state knows (the trigram ones it does not), as SQLite gets them.
SUBJECT = ["tenant", "oauth_subject", "-started_at"]
CLIENT = ["tenant", "oauth_client", "-started_at"]
OLD_INDEXES = [
    models.Index(fields=SUBJECT, name="invocation_tenant_subject"),
    models.Index(fields=CLIENT, name="invocation_tenant_client"),
]
NEW_INDEXES = [
    models.Index(fields=SUBJECT, name="invocation_oauth_subject", condition=~models.Q(oauth_subject="")),
    models.Index(fields=CLIENT, name="invocation_oauth_client", condition=~models.Q(oauth_client="")),
]


def _like_index(schema_editor) -> str:
    return schema_editor._create_index_name(TABLE, ["call_id"], suffix="_like")


def _swap(schema_editor, build: dict[str, str], drop: dict[str, str]) -> None:
    for name, definition in build.items():
        schema_editor.execute(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON {TABLE} {definition}")
    for name in drop:
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        _swap(schema_editor, NEW, OLD)
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {_like_index(schema_editor)}")
        return
    _replace(apps, schema_editor, OLD_INDEXES, NEW_INDEXES)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {_like_index(schema_editor)} "
            f"ON {TABLE} (call_id varchar_pattern_ops)"
        )
        _swap(schema_editor, OLD, NEW)
        return
    _replace(apps, schema_editor, NEW_INDEXES, OLD_INDEXES)


def _replace(apps, schema_editor, old: list[models.Index], new: list[models.Index]) -> None:
    model = apps.get_model("audit", "Invocation")
    for index in new:
        schema_editor.add_index(model, index)
    for index in old:
        schema_editor.remove_index(model, index)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("audit", "0010_invocation_connection")]

    operations = [
        migrations.AlterField(
            model_name="invocation",
            name="tenant",
            field=models.ForeignKey(
                db_index=False,
                on_delete=models.deletion.CASCADE,
                related_name="invocations",
                to="tenants.tenant",
            ),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="invocation",
                    name="call_id",
                    field=models.CharField(blank=True, editable=False, max_length=32, null=True),
                ),
                migrations.AddConstraint(
                    model_name="invocation",
                    constraint=models.UniqueConstraint(fields=["call_id"], name="audit_invocation_call_id_key"),
                ),
                *(migrations.RemoveIndex(model_name="invocation", name=index.name) for index in OLD_INDEXES),
                *(migrations.AddIndex(model_name="invocation", index=index) for index in NEW_INDEXES),
            ],
            database_operations=[migrations.RunPython(forwards, backwards, elidable=False)],
        ),
    ]
