"""The accounts API: who I am, signing in and out, my credentials, and the users."""

from django.urls import path

from backend.accounts.api.views import (
    AllowedIpEventViewSet,
    AllowedIpViewSet,
    ApiTokenViewSet,
    SshKeyViewSet,
    UserViewSet,
    login_view,
    logout_view,
    me_view,
    session_view,
)
from backend.core.routers import AppRouter

router = AppRouter()
router.register("users", UserViewSet, basename="user")
router.register("me/tokens", ApiTokenViewSet, basename="token")
router.register("me/ssh-keys", SshKeyViewSet, basename="ssh-key")
router.register("me/allowed-ips", AllowedIpViewSet, basename="allowed-ip")
router.register("me/allowed-ip-events", AllowedIpEventViewSet, basename="allowed-ip-event")

urlpatterns = [
    path("me/", me_view, name="me"),
    path("auth/login/", login_view, name="login"),
    path("auth/logout/", logout_view, name="logout"),
    path("auth/session/", session_view, name="session"),
    *router.urls,
]
