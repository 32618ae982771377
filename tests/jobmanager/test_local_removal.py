"""The reaper of removed jobs' leftovers: each entry finished once, by one reaper, and
those a reaper left when its process ended finished by the next."""

from __future__ import annotations

import os
import time

from jobmanager.backends.local_removal import FILLING, STALE_SECONDS, TAKEN, Reaper


def test_each_entry_is_finished_once_and_removed(tmp_path):
    finished = []
    reaper = Reaper(
        tmp_path / ".removing", lambda entries: finished.extend(entry.name for entry in entries)
    )
    for job_id in ("j1", "j2"):
        entry = reaper.entry(job_id)
        (entry / "state.json").write_text("{}")
        reaper.queue(entry)

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


def test_an_entry_still_being_filled_is_not_taken_by_a_reaper_at_work(tmp_path):
    # A reaper running for an earlier removal took the entry a later removal was moving a
    # job's files into (its rename of state.json failed: No such file or directory).
    finished = []
    reaper = Reaper(
        tmp_path / ".removing", lambda entries: finished.extend(entry.name for entry in entries)
    )
    entry = reaper.entry("j4")
    reaper.finish_all()
    (entry / "state.json").write_text("{}")  # the removal goes on moving files in
    assert finished == [] and (entry / "state.json").exists()

    reaper.queue(entry)
    reaper.finish_all()
    assert [name.removeprefix(TAKEN) for name in finished] == [entry.name.removeprefix(FILLING)]
    assert list(reaper.trash.iterdir()) == []


def test_an_entry_left_half_filled_by_a_process_that_ended_is_finished(tmp_path):
    finished = []
    reaper = Reaper(
        tmp_path / ".removing", lambda entries: finished.extend(entry.name for entry in entries)
    )
    entry = reaper.entry("j5")  # its process killed before it queued it
    long_ago = time.time() - STALE_SECONDS - 1
    os.utime(entry, (long_ago, long_ago))
    reaper.finish_all()
    assert finished == [f"{TAKEN}j5.{entry.name.split('.')[-1]}"] and not entry.exists()
