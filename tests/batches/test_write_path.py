"""Every file Relay writes (a batch's request file, its response segments, an uploaded file) goes through the one
write path: it has RELAY_BATCH_PAYLOAD_MODE's mode whatever the umask, its folders the matching search bits, and
the folder holding each new file or folder is synced after the entry appears (so a crash cannot lose a file whose
bytes were synced). The real stores on a real disk; `os.fsync` is only watched, still called."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from uuid import uuid4

import pytest

from app.payload_uploads import FileDisk
from app.payloads import FolderStore

FILE_MODE, DIR_MODE = 0o640, 0o750


@pytest.fixture()
def synced(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Path]]:
    """The directories fsynced (in order) while the test runs."""
    seen: list[Path] = []
    real = os.fsync

    def watching(fd: int) -> None:
        real(fd)
        path = Path(os.readlink(f"/proc/self/fd/{fd}"))
        if path.is_dir():
            seen.append(path)

    monkeypatch.setattr(os, "fsync", watching)
    old = os.umask(0o022)  # a common umask: 0644 files in 0755 folders unless Relay sets the modes
    try:
        yield seen
    finally:
        os.umask(old)


def _entries(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if ".staging" not in p.relative_to(root).parts]


def _assert_written_whole(root: Path, synced: list[Path]) -> None:
    entries = _entries(root)
    assert entries, "nothing was written"
    for path in [root, *entries]:
        want = DIR_MODE if path.is_dir() else FILE_MODE
        assert stat.S_IMODE(path.stat().st_mode) == want, f"{path}: {stat.S_IMODE(path.stat().st_mode):04o}"
        assert path.parent in synced, f"the folder of {path.relative_to(root.parent)} was not synced"


def test_a_batchs_request_file_and_response_segment_have_the_mode_in_synced_folders(tmp_path: Path,
                                                                                   synced: list[Path]) -> None:
    store = FolderStore(tmp_path / "payloads", mode=FILE_MODE)
    batch = uuid4()
    store.write_requests(batch, [b'{"a":1}', b'{"b":2}'])
    store.append_response(batch, 0, b"{}")
    store.sync()
    store.close()
    names = {p.name for p in store.batch_dir(batch).iterdir()}
    assert "requests.bin" in names and any(n.endswith(".seg") for n in names)
    _assert_written_whole(store.root, synced)


def test_an_uploaded_file_has_the_mode_in_synced_folders(tmp_path: Path, synced: list[Path]) -> None:
    disk = FileDisk(tmp_path / "payloads", mode=FILE_MODE)
    staged = disk.stage()
    staged.handle.write(b'{"custom_id": "a"}\n')
    file_id = uuid4()
    disk.publish(staged, file_id)
    assert disk.path(file_id).read_bytes() == b'{"custom_id": "a"}\n'
    _assert_written_whole(disk.root.parent, synced)
