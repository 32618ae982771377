from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "backend.jobs"
    label = "jobs"
