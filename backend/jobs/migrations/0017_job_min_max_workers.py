# Elastic jobs (issue 34): a worker range, both ends equal to workers for existing jobs.

from django.db import migrations, models


def fixed_size_ranges(apps, schema_editor):
    Job = apps.get_model("jobs", "Job")
    Job.objects.update(min_workers=models.F("workers"), max_workers=models.F("workers"))


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0016_job_whole_nodes_same_switch"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="min_workers",
            field=models.PositiveIntegerField(
                default=1, help_text="The fewest workers it runs with (elastic jobs)."
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="max_workers",
            field=models.PositiveIntegerField(
                default=1, help_text="The most workers it grows to (elastic jobs)."
            ),
        ),
        migrations.RunPython(fixed_size_ranges, migrations.RunPython.noop),
    ]
