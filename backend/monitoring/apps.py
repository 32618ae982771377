from django.apps import AppConfig


class MonitoringConfig(AppConfig):
    name = "backend.monitoring"
    label = "monitoring"
