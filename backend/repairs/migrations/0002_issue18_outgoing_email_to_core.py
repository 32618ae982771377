"""The outbox is core's now (core 0001): only Django's state forgets it here."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("repairs", "0001_initial"), ("core", "0001_issue18_outgoing_email")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="OutgoingEmail")],
            database_operations=[],
        ),
    ]
