from django.apps import AppConfig
from django.core import checks


class JobsConfig(AppConfig):
    name = "backend.jobs"
    label = "jobs"

    def ready(self) -> None:
        from django.db.models.signals import post_delete, post_save

        from backend.clusters.models import Node
        from backend.jobs.actions import run_job_manager_after_commit

        def node_changed(sender, **kwargs) -> None:
            # A node added, removed, cordoned or back from repair changes what fits.
            run_job_manager_after_commit()

        post_save.connect(node_changed, sender=Node, weak=False)
        post_delete.connect(node_changed, sender=Node, weak=False)
        checks.register(check_retry_rules)


def check_retry_rules(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """A bad TRAINYARD_RETRY_RULES file is reported when a process starts, not when the
    first job fails."""
    from jobmanager.retries import load_rules

    try:
        load_rules()
    except ValueError as error:
        return [checks.Error(str(error), id="trainyard.E001", hint="Fix TRAINYARD_RETRY_RULES.")]
    return []
