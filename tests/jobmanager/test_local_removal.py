"""The reaper of removed jobs' leftovers: each entry finished once, by one reaper, and
those a reaper left when its process ended finished by the next."""

from __future__ import annotations

import os
import time

from jobmanager.backends.local_removal import STALE_SECONDS, TAKEN, Reaper


def test_each_entry_is_finished_once_and_removed(tmp_path):
    finished = []
    reaper = Reaper(
        tmp_path / ".removing", lambda entries: finished.extend(entry.name for entry in entries)
    )
    for job_id in ("j1", "j2"):
        (reaper.entry(job_id) / "state.json").write_text("{}")

    reaper.soon()
    reaper.wait()

    assert sorted(name.removeprefix(TAKEN).split(".")[0] for name in finished) == ["j1", "j2"]
    assert list(reaper.trash.iterdir()) == []


def test_an_entry_another_reaper_finishes_is_left_to_it_until_that_one_ended(tmp_path):
    finished = []
    reaper = Reaper(
        tmp_path / ".removing", lambda entries: finished.extend(entry.name for entry in entries)
    )
    taken = reaper.trash / f"{TAKEN}j3.abcd"
    reaper.trash.mkdir()
    taken.mkdir()

    reaper.finish_all()
    assert finished == [] and taken.exists()  # another process's reaper is at it

    long_ago = time.time() - STALE_SECONDS - 1
    os.utime(taken, (long_ago, long_ago))  # and that process ended before it finished
    reaper.finish_all()
    assert finished == [f"{TAKEN}j3.abcd"] and not taken.exists()
