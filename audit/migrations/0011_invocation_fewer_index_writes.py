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
# The error message's trigram index, which Django's state does not know (as in 0002).
TRIGRAM = "USING gin (UPPER(error_message) gin_trgm_ops)"
TRIGRAM_NEW = "invocation_error_text_trgm", f"{TRIGRAM} WHERE NOT (error_message = '')"
TRIGRAM_OLD = "invocation_error_trgm", TRIGRAM
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


def _replace(apps, schema_editor, old: list[models.Index], new: list[models.Index]) -> None:
    """Build ``new``, then drop ``old``; on PostgreSQL CONCURRENTLY, and so that a run cut
    short (a CONCURRENTLY build is no transaction) can be run again."""
    model = apps.get_model("audit", "Invocation")
    if schema_editor.connection.vendor != "postgresql":
        for index in new:
            schema_editor.add_index(model, index)
        for index in old:
            schema_editor.remove_index(model, index)
        return
    for index in new:
        create = str(index.create_sql(model, schema_editor, concurrently=True))
        schema_editor.execute(create.replace("CONCURRENTLY", "CONCURRENTLY IF NOT EXISTS", 1))
    for index in old:
        schema_editor.execute(index.remove_sql(model, schema_editor, concurrently=True))  # IF EXISTS


def _swap_trigram(schema_editor, new: tuple[str, str], old: tuple[str, str]) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {new[0]} ON {TABLE} {new[1]}")
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {old[0]}")


def _like_index(schema_editor) -> str:
    return schema_editor._create_index_name(TABLE, ["call_id"], suffix="_like")


def forwards(apps, schema_editor):
    _replace(apps, schema_editor, OLD_INDEXES, NEW_INDEXES)
    _swap_trigram(schema_editor, TRIGRAM_NEW, TRIGRAM_OLD)
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {_like_index(schema_editor)}")


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {_like_index(schema_editor)} "
            f"ON {TABLE} (call_id varchar_pattern_ops)"
        )
    _swap_trigram(schema_editor, TRIGRAM_OLD, TRIGRAM_NEW)
    _replace(apps, schema_editor, NEW_INDEXES, OLD_INDEXES)


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
