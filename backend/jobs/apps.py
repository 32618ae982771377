from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "backend.jobs"
    label = "jobs"

    def ready(self) -> None:
        from backend.jobs import extensions

        extensions.register()  # a VC's resources and a node's free GPUs in their answers
