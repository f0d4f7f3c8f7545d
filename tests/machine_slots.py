"""Machine-wide test slots: the test processes of every run on this machine take turns, a group at a time.

Two full runs at once (two checkouts, or CI beside a developer's run) would otherwise start twice the processes on
the same cores: at a load of 30 to 45 on two cores, deadlines meant for one run's load (a private RabbitMQ booting,
a rate-limit window filling) were crossed. So a test process runs a group (tests/tiers.py: a file, the cluster's
or the console's folder, one bench scenario) only while it holds one of SLOTS lock files in a folder all runs
share; a group's processes start and stop inside its slot. One run of 4 workers never waits (4 slots); two runs
share them, each taking about twice as long, at the load of one.

- `RELAY_TEST_SLOTS`: how many (default 4, the default number of workers; 0: no slots).
- `RELAY_TEST_SLOTS_DIR`: the shared folder (default `<tmp>/relay-test-slots`).

A slot is an `flock` on `slot-<n>`: the kernel frees it when its process dies. The wait happens before pytest-timeout
starts a test's clock (this hook wraps it), so a test's own bounds count only its own time. A process that holds a
slot marks its environment (HELD_ENV), so a pytest it starts (tests/test_tiers.py) runs within the slot it holds.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.cluster.pgnodes import alive
from tests.tiers import group_name

SLOTS_ENV, DIR_ENV = "RELAY_TEST_SLOTS", "RELAY_TEST_SLOTS_DIR"
HELD_ENV = "RELAY_TEST_SLOT_HELD"
DEFAULT_SLOTS = 4
POLL_S = 0.2  # how often a waiting process tries the slots again
COURTESY_S = 3 * POLL_S  # how long a process that just gave a slot back lets waiting processes try first


class Slots:
    """This process's hold on one of COUNT lock files in FOLDER (at most one at a time)."""

    def __init__(self, folder: Path, count: int) -> None:
        self.folder, self.count = folder, count
        self.fd: int | None = None
        self.released = False  # a slot was held and given back: the next acquire lets waiting processes go first

    def acquire(self) -> None:
        """Hold a slot, waiting for one as long as it takes (after a release, processes already waiting try first)."""
        if not self.folder.exists():
            self.folder.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(OSError):  # shared like /tmp: another user's runs take turns too
                self.folder.chmod(0o1777)
        waiting = self.folder / f"waiting-{os.getpid()}"
        if self.released and self.others_waiting():
            time.sleep(COURTESY_S)
        while (fd := self._try_each()) is None:
            with contextlib.suppress(OSError):
                waiting.touch()
            time.sleep(POLL_S)
        with contextlib.suppress(OSError):
            waiting.unlink(missing_ok=True)
        self.fd = fd
        os.environ[HELD_ENV] = "1"

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the file frees its flock
            self.fd, self.released = None, True
            os.environ.pop(HELD_ENV, None)

    def others_waiting(self) -> bool:
        """Whether another living process is waiting for a slot."""
        for mark in self.folder.glob("waiting-*"):
            number = mark.name.removeprefix("waiting-")
            pid = int(number) if number.isdigit() else 0
            if pid == os.getpid():
                continue
            if alive(pid):  # a zombie or a gone process does not wait
                return True
            with contextlib.suppress(OSError):
                mark.unlink(missing_ok=True)  # its process is gone
        return False

    def _try_each(self) -> int | None:
        for n in range(self.count):
            fd = os.open(self.folder / f"slot-{n}", os.O_RDONLY | os.O_CREAT, 0o666)  # flock needs no write
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            return fd
        return None


def slots_from_env(environ: dict[str, str] | os._Environ[str] = os.environ) -> Slots | None:
    """The slots this process takes, or None: turned off (RELAY_TEST_SLOTS=0), or within a slot its parent holds."""
    if environ.get(HELD_ENV):
        return None
    given = environ.get(SLOTS_ENV, str(DEFAULT_SLOTS)) or "0"
    if not given.isdigit():
        raise pytest.UsageError(f"{SLOTS_ENV} is a number of slots (0: none), not {given!r}")
    count = int(given)
    if count <= 0:
        return None
    folder = Path(environ.get(DIR_ENV) or Path(tempfile.gettempdir()) / "relay-test-slots")
    return Slots(folder, count)


_KEY = pytest.StashKey[Slots | None]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_KEY] = slots_from_env()


@pytest.hookimpl(hookwrapper=True, tryfirst=True)  # outside pytest-timeout's: the wait is not the test's time
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    slots = item.config.stash.get(_KEY, None)
    if slots is not None and slots.fd is None:
        slots.acquire()
    yield
    if slots is not None and (nextitem is None or group_name(nextitem) != group_name(item)):
        slots.release()  # the group's module fixtures were torn down in this item's teardown
