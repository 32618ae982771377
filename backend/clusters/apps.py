from django.apps import AppConfig


class ClustersConfig(AppConfig):
    name = "backend.clusters"
    label = "clusters"
