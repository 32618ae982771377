"""The outbox moves from the repairs app to core: its table stays, only Django's state moves."""

import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [("repairs", "0001_initial")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="OutgoingEmail",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("key", models.CharField(max_length=200, unique=True)),
                        ("recipients", models.JSONField(default=list)),
                        ("subject", models.CharField(max_length=300)),
                        ("body", models.TextField()),
                        ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                        ("sent_at", models.DateTimeField(blank=True, null=True)),
                        ("attempts", models.PositiveIntegerField(default=0)),
                        ("last_error", models.TextField(blank=True)),
                    ],
                    options={
                        "db_table": "repairs_outgoingemail",
                        "ordering": ["created_at", "id"],
                        "indexes": [
                            models.Index(
                                fields=["sent_at", "created_at"], name="outgoing_email_idx"
                            )
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
