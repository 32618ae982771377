from django.apps import AppConfig
from django.core import checks


class JobsConfig(AppConfig):
    name = "backend.jobs"
    label = "jobs"

    def ready(self) -> None:
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
