from django.apps import AppConfig
from django.core import checks


class RepairsConfig(AppConfig):
    name = "backend.repairs"
    label = "repairs"

    def ready(self) -> None:
        checks.register(check_repair_rules)


def check_repair_rules(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """A bad TRAINYARD_REPAIR_RULES file is reported when a process starts."""
    from backend.repairs.manager import current_rules
    from repairmanager.rules import RuleError

    try:
        current_rules()
    except (RuleError, OSError) as error:
        return [checks.Error(str(error), id="trainyard.E002", hint="Fix TRAINYARD_REPAIR_RULES.")]
    return []
