"""The machine-wide test slots (tests/machine_slots.py): a slot is held by one process at a time, a waiting process
gets it once it is given back, a dead process's slot and waiting mark are freed, and a pytest started within a slot
takes none."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.machine_slots import HELD_ENV, Slots, slots_from_env


def test_one_slot_is_held_by_one_holder_at_a_time_and_a_waiter_gets_it_when_given_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(HELD_ENV, raising=False)
    first, second = Slots(tmp_path, 1), Slots(tmp_path, 1)
    first.acquire()
    assert os.environ.get(HELD_ENV) == "1"
    assert second._try_each() is None  # flock: another open file of the same slot is refused
    got = threading.Event()

    def wait_for_it() -> None:
        second.acquire()
        got.set()

    waiter = threading.Thread(target=wait_for_it)
    waiter.start()
    assert not got.wait(1.0)  # still held
    assert second.others_waiting() is False and first.others_waiting() is False  # this process's own mark
    first.release()
    assert got.wait(60), "the waiting holder never got the slot"
    waiter.join(60)
    assert second.fd is not None
    second.release()
    assert first.released and second.released


def test_a_slot_of_a_process_that_died_is_free_and_its_waiting_mark_is_dropped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(HELD_ENV, raising=False)
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl,os,sys,time; fd=os.open(sys.argv[1],"
                               " os.O_RDWR|os.O_CREAT); fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True);"
                               " time.sleep(600)", str(tmp_path / "slot-0")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        slots = Slots(tmp_path, 1)
        assert slots._try_each() is None
        (tmp_path / f"waiting-{holder.pid}").touch()
        assert slots.others_waiting()  # a living process waits
    finally:
        holder.kill()
        holder.wait()
    assert not slots.others_waiting()  # its mark is dropped with it
    assert not (tmp_path / f"waiting-{holder.pid}").exists()
    slots.acquire()  # the kernel freed its flock
    slots.release()


def test_slots_are_off_within_a_held_slot_or_when_set_to_zero(tmp_path: Path) -> None:
    assert slots_from_env({HELD_ENV: "1"}) is None
    assert slots_from_env({"RELAY_TEST_SLOTS": "0"}) is None
    chosen = slots_from_env({"RELAY_TEST_SLOTS": "3", "RELAY_TEST_SLOTS_DIR": str(tmp_path)})
    assert chosen is not None and (chosen.count, chosen.folder) == (3, tmp_path)
    default = slots_from_env({})
    assert default is not None and default.count == 4
    with pytest.raises(pytest.UsageError, match="RELAY_TEST_SLOTS"):
        slots_from_env({"RELAY_TEST_SLOTS": "four"})
