"""A transaction that MariaDB chooses as a deadlock's victim is run again, not answered
503 (``backend.core.deadlocks``; a batch kill beside the job manager's pass met one in CI).
Two threads lock two rows in opposite orders: a real deadlock, on the real server."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from django.db import OperationalError, connection, connections

from backend.core.deadlocks import DEADLOCK, atomic_retrying_deadlocks
from backend.vcs.models import VirtualCluster
from tests.factories import VirtualClusterFactory

pytestmark = pytest.mark.django_db(transaction=True)


def crossed(attempts: int) -> tuple[list[object], list[int]]:
    """Each of two threads locks one VC row, waits until the other holds the other row,
    then locks that one too; each thread's outcome (its result or its error) and how many
    times each ran its transaction."""
    if connection.vendor != "mysql":
        pytest.skip("a deadlock victim is MariaDB/MySQL's (SQLite locks the whole file)")
    rows = [VirtualClusterFactory().pk, VirtualClusterFactory().pk]
    both_hold_one = threading.Barrier(2, timeout=30)
    outcomes: list[object] = [None, None]
    runs = [0, 0]

    def thread(index: int) -> Callable[[], None]:
        first, second = rows[index], rows[1 - index]

        def work() -> str:
            runs[index] += 1
            list(VirtualCluster.objects.select_for_update().filter(pk=first))
            if runs[index] == 1:
                both_hold_one.wait()
            list(VirtualCluster.objects.select_for_update().filter(pk=second))
            return "done"

        def run() -> None:
            try:
                outcomes[index] = atomic_retrying_deadlocks(work, attempts=attempts)
            except OperationalError as error:
                outcomes[index] = error
            finally:
                connections.close_all()

        return run

    threads = [threading.Thread(target=thread(index)) for index in (0, 1)]
    for started in threads:
        started.start()
    for started in threads:
        started.join(timeout=60)
    return outcomes, runs


def test_the_deadlock_is_real_without_a_second_run():
    outcomes, _ = crossed(attempts=1)

    victims = [outcome for outcome in outcomes if isinstance(outcome, OperationalError)]
    assert len(victims) == 1 and victims[0].args[0] == DEADLOCK
    assert "done" in outcomes


def test_the_victim_of_a_deadlock_is_run_again_and_both_transactions_finish():
    outcomes, runs = crossed(attempts=3)

    assert outcomes == ["done", "done"]
    assert sorted(runs) == [1, 2]
