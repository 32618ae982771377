from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0013_job_ports"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="deadline",
            field=models.DateTimeField(
                blank=True, help_text="When its owner needs it finished (optional).", null=True
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="deadline_forecast",
            field=models.BooleanField(
                blank=True,
                help_text="Predicted to finish by its deadline (the start-time forecast); "
                "null: no deadline, or no forecast yet.",
                null=True,
            ),
        ),
    ]
