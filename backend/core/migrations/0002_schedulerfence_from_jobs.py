"""SchedulerFence comes from the jobs app (the lease and its fence are core's, issue 35):
only Django's state changes, the model keeps the table jobs_schedulerfence and its rows.
Its table is made by jobs' migration 0003."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("core", "0001_issue18_outgoing_email")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="SchedulerFence",
                    fields=[
                        (
                            "name",
                            models.CharField(max_length=40, primary_key=True, serialize=False),
                        ),
                        ("token", models.BigIntegerField(default=0)),
                        ("applied_at", models.DateTimeField(blank=True, null=True)),
                    ],
                    options={"db_table": "jobs_schedulerfence"},
                )
            ],
            database_operations=[],
        )
    ]
