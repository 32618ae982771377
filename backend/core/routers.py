"""The router every app's ``api/urls.py`` registers its viewsets with."""

from rest_framework.routers import DefaultRouter


class AppRouter(DefaultRouter):
    """DefaultRouter's routes (with ``.json`` format suffixes) without its API root:
    backend/urls.py serves one root, /api/v1/, for every app's viewsets."""

    include_root_view = False
