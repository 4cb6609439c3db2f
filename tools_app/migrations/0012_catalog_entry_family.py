"""Tools join the catalog-entry family (``CatalogEntry``); one constraint pair per catalog.

Nothing moves: the tool table, its rows and ids stay. What changes is the tool's tenant help
text (the family's), and the per-tenant uniqueness of backend secrets and upstream servers,
renamed to the family's ``<model>_unique_private_<field>`` (same columns; the new constraint
is added before the old one goes, so names stay unique throughout).
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("tenants", "0002_tenant_api_keys_enabled"),
        ("tools_app", "0011_access_rule_enabled"),
    ]

    operations = [
        migrations.AlterField(
            model_name="tool",
            name="tenant",
            field=models.ForeignKey(
                blank=True,
                help_text="Empty: in the platform catalog. Set: private to that tenant.",
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="private_%(class)ss",
                to="tenants.tenant",
            ),
        ),
        migrations.AddConstraint(
            model_name="backendsecret",
            constraint=models.UniqueConstraint(fields=("tenant", "name"), name="backendsecret_unique_private_name"),
        ),
        migrations.RemoveConstraint(model_name="backendsecret", name="backendsecret_unique_tenant_name"),
        migrations.AddConstraint(
            model_name="upstreamserver",
            constraint=models.UniqueConstraint(fields=("tenant", "name"), name="upstreamserver_unique_private_name"),
        ),
        migrations.RemoveConstraint(model_name="upstreamserver", name="upstreamserver_unique_tenant_name"),
    ]
