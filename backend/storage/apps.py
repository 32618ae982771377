from django.apps import AppConfig


class StorageConfig(AppConfig):
    name = "backend.storage"
    label = "storage"
    verbose_name = "Shared storage"
