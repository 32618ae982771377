"""``Authorization: Token <key>`` for scripts, checked against the stored digest."""

from __future__ import annotations

from rest_framework import authentication, exceptions

from backend.accounts.actions import user_for_token


class ApiTokenAuthentication(authentication.TokenAuthentication):
    keyword = "Token"

    def authenticate_credentials(self, key: str):
        user = user_for_token(key)
        if user is None:
            raise exceptions.AuthenticationFailed("Invalid or revoked token.")
        return (user, None)
