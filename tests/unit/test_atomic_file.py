"""write_file_atomically: the one temp-file, fsync, rename, fsync-dir helper."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from storage_core import atomic_file
from storage_core.atomic_file import TEMP_FILE_SUFFIX, write_file_atomically


def test_writes_and_replaces_leaving_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    write_file_atomically(target, b"first")
    write_file_atomically(target, b"second, longer")
    assert target.read_bytes() == b"second, longer"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


@pytest.mark.parametrize("unique_temp", [False, True])
def test_crash_before_the_rename_leaves_the_old_file_intact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unique_temp: bool
) -> None:
    target = tmp_path / "checkpoint"
    target.write_bytes(b"old content")
    seen: list[tuple[str, str]] = []

    def crash_at_rename(src: str | Path, dst: str | Path) -> None:
        seen.append((str(src), str(dst)))
        # What a crash here would leave on disk: the old target and a complete temp file.
        assert Path(dst).read_bytes() == b"old content"
        assert Path(src).read_bytes() == b"new content"
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(atomic_file.os, "replace", crash_at_rename)
    with pytest.raises(OSError, match="Input/output error"):
        write_file_atomically(target, b"new content", unique_temp=unique_temp)
    monkeypatch.undo()

    ((src, dst),) = seen
    assert src != str(target), "the temp file must never be the target path"
    assert Path(src).parent == tmp_path and src.endswith(TEMP_FILE_SUFFIX)
    assert dst == str(target)
    assert target.read_bytes() == b"old content"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"], "temp file removed"


def test_data_and_directory_are_fsynced_before_and_after_the_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append("fsync-dir" if os.path.isdir(f"/proc/self/fd/{fd}") else "fsync-file")
        real_fsync(fd)

    def replace(src: str | Path, dst: str | Path) -> None:
        events.append("rename")
        real_replace(src, dst)

    monkeypatch.setattr(atomic_file.os, "fsync", fsync)
    monkeypatch.setattr(atomic_file.os, "replace", replace)
    write_file_atomically(tmp_path / "f", b"x")
    assert events == ["fsync-file", "rename", "fsync-dir"]


def test_missing_directory_is_an_error_and_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        write_file_atomically(tmp_path / "absent" / "f", b"x")
    assert list(tmp_path.iterdir()) == []


def test_unique_temp_files_let_concurrent_writers_each_land_whole(tmp_path: Path) -> None:
    target = tmp_path / "summary.json"
    payloads = [bytes([65 + i]) * 200_000 for i in range(8)]
    errors: list[BaseException] = []

    def write(data: bytes) -> None:
        try:
            for _ in range(5):
                write_file_atomically(target, data, unique_temp=True)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(p,)) for p in payloads]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert target.read_bytes() in payloads  # one writer's bytes, never a mix
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]
