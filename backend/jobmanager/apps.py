from django.apps import AppConfig
from django.core import checks


class JobManagerConfig(AppConfig):
    """The job manager's shell (the pure library is the top-level ``jobmanager/``): the run
    under the lease, the snapshot and the applying of decisions, deployment, reconcile,
    its Celery tasks and its commands. It has no models: it reads and writes ``jobs``'."""

    name = "backend.jobmanager"
    label = "jobmanager"
    verbose_name = "Trainyard job manager"

    def ready(self) -> None:
        checks.register(check_retry_rules)
        # Deleting a node (the nodes' API and admin) drains the jobs that run there first.
        from backend.clusters.extensions import node_removal
        from backend.jobmanager.removal import request_node_removal

        node_removal.register(request_node_removal)


def check_retry_rules(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """A bad TRAINYARD_RETRY_RULES file is reported when a process starts, not when the
    first job fails."""
    from jobmanager.retries import load_rules

    try:
        load_rules()
    except ValueError as error:
        return [checks.Error(str(error), id="trainyard.E001", hint="Fix TRAINYARD_RETRY_RULES.")]
    return []
