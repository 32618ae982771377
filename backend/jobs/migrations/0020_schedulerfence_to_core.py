"""SchedulerFence moves to the core app (the lease and its fence are core's, issue 35): only
Django's state changes, the table jobs_schedulerfence and its rows stay."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("jobs", "0019_deadlines_issue34")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="SchedulerFence")],
            database_operations=[],
        )
    ]
