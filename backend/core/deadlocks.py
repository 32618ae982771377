"""A transaction that MariaDB/MySQL chose as a deadlock's victim, run again.

InnoDB rolls the victim back whole and says so with error 1213; the standard answer is to
run the same transaction again. Only a transaction of its own can be run again: inside
an outer one, the outer one was rolled back too, so the error is passed on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from django.db import OperationalError, connection, transaction

logger = logging.getLogger(__name__)
T = TypeVar("T")
DEADLOCK = 1213  # ER_LOCK_DEADLOCK
ATTEMPTS = 3


def atomic_retrying_deadlocks(work: Callable[[], T], attempts: int = ATTEMPTS) -> T:
    """``work()`` in a transaction, run again (up to ``attempts`` times in all) when the
    database chose it as a deadlock's victim; anything else is raised as it is."""
    nested = connection.in_atomic_block
    for attempt in range(1, attempts + 1):
        try:
            with transaction.atomic():
                return work()
        except OperationalError as error:
            if nested or attempt == attempts or not error.args or error.args[0] != DEADLOCK:
                raise
            logger.info("a deadlock's victim, run again (%d of %d)", attempt + 1, attempts)
    raise AssertionError("unreachable")
