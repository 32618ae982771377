"""A real SMTP server (aiosmtpd) on a free port, with Django's email pointed at it.

Use it from a test module with ``pytest_plugins = ["tests.smtp"]`` and the ``smtp``
fixture: ``smtp.messages`` are the ``email.message.Message`` objects it received (each
with an ``X-Rcpt-To`` header naming its envelope recipients), ``smtp.to(address)`` those
sent to one address.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from email import message_from_bytes
from email.message import Message

import pytest
from aiosmtpd.controller import Controller

from tests.polling import wait_until
from tests.servers import free_port


class Inbox:
    def __init__(self) -> None:
        self._messages: list[Message] = []
        self._lock = threading.Lock()  # the server runs in a thread of its own

    async def handle_DATA(self, server, session, envelope) -> str:
        message = message_from_bytes(envelope.content)
        message["X-Rcpt-To"] = ", ".join(envelope.rcpt_tos)
        with self._lock:
            self._messages.append(message)
        return "250 Message accepted for delivery"

    @property
    def messages(self) -> list[Message]:
        with self._lock:
            return list(self._messages)

    def to(self, address: str) -> list[Message]:
        return [m for m in self.messages if address in m["X-Rcpt-To"].split(", ")]

    def wait_for(self, count: int, timeout: float = 10) -> list[Message]:
        """The messages, once at least ``count`` have arrived (polled, with a deadline)."""
        wait_until(
            lambda: len(self.messages) >= count,
            timeout,
            f"{count} emails (so far {len(self.messages)} arrived)",
        )
        return self.messages


@pytest.fixture
def smtp(settings) -> Iterator[Inbox]:
    inbox = Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=free_port())
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST = "127.0.0.1"
    settings.EMAIL_PORT = controller.port
    settings.EMAIL_USE_TLS = False
    settings.DEFAULT_FROM_EMAIL = "trainyard@cluster.test"
    try:
        yield inbox
    finally:
        controller.stop()
