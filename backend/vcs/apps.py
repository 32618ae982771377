from django.apps import AppConfig


class VcsConfig(AppConfig):
    name = "backend.vcs"
    label = "vcs"
