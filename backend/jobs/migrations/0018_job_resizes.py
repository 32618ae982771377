# Elastic jobs (issue 34): how often the scheduler resized a job, and when it last did.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0017_job_min_max_workers"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="resizes",
            field=models.PositiveIntegerField(
                default=0,
                help_text="Times the scheduler grew or shrank it (each a re-rendezvous).",
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="resized_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
