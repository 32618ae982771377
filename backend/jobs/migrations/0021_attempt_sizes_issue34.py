"""Each attempt keeps its sizes over time (issue 34): its GPUs and borrowed GPUs at its start
and at each resize of an elastic job, for booked vs borrowed GPU-hours. Old attempts keep
an empty list: their start size all along, as before."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0020_schedulerfence_to_core"),
    ]

    operations = [
        migrations.AddField(
            model_name="jobattempt",
            name="sizes",
            field=models.JSONField(blank=True, default=list),
        ),
    ]
