"""``manage.py issue_token USERNAME [--admin]``: bootstrap API access without a browser."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from backend.accounts.actions import create_api_token, create_user


class Command(BaseCommand):
    help = "Create the user if missing and print a fresh API token for them."
    # As Django's createsuperuser: it writes one user and a token, and needs none of the
    # system checks, which import every view (the URL checks) and parse the rule files.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--admin", action="store_true", help="Make the user a cluster admin.")
        parser.add_argument("--email", default="")
        parser.add_argument("--name", default="", help="Token name (default: cli-<timestamp>).")

    def handle(self, *args: object, **options: Any) -> None:
        username = str(options["username"])
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            user = create_user(username, str(options["email"]), is_staff=bool(options["admin"]))
            self.stderr.write(f"Created user {username}.")
        elif options["admin"] and not user.is_staff:
            user.is_staff = user.is_superuser = True
            user.save(update_fields=["is_staff", "is_superuser"])
            self.stderr.write(f"Made {username} a cluster admin.")
        name = str(options["name"]) or f"cli-{timezone.now():%Y%m%d-%H%M%S-%f}"
        _, plaintext = create_api_token(user, name)
        self.stdout.write(plaintext)
