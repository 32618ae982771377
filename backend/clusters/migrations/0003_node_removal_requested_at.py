from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("clusters", "0002_node_ready"),
    ]

    operations = [
        migrations.AddField(
            model_name="node",
            name="removal_requested_at",
            field=models.DateTimeField(
                blank=True,
                help_text="Draining to be removed: gone once no job runs there.",
                null=True,
            ),
        ),
    ]
