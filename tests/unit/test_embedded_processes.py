"""``ProcessGroup`` stops a child's whole group, grandchildren included, and the embedded
working directory is never taken over from someone else; a failed job says why."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from embedded.cluster import MARKER, DirectoryInUseError, prepare_directory
from embedded.disaster import DisasterCheckError, run_job
from embedded.processes import ProcessGroup, group_alive, process_table

# a shell that starts a grandchild ignoring SIGTERM, then waits forever
STUBBORN = [
    sys.executable,
    "-c",
    "import subprocess, sys, time;"
    "subprocess.Popen([sys.executable, '-c', 'import signal, time;"
    " signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)']);"
    "time.sleep(600)",
]


def test_stop_reaches_grandchildren_that_ignore_sigterm(tmp_path: Path) -> None:
    child = ProcessGroup("stubborn", STUBBORN, log_path=tmp_path / "out.log").start()
    deadline = time.monotonic() + 20
    members: list[int] = []
    while len(members) < 2 and time.monotonic() < deadline:
        members = [pid for pid, e in process_table().items() if e.group == child.pid]
        time.sleep(0.05)
    assert len(members) == 2
    started = time.monotonic()
    child.stop(grace_s=1.0)
    assert time.monotonic() - started < 10
    assert not group_alive(child.pid)
    assert not set(members) & set(process_table())


def test_prepare_directory_refuses_foreign_content_and_wipes_its_own(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(DirectoryInUseError, match="was not created by the embedded cluster"):
        prepare_directory(foreign, fresh=True)
    assert (foreign / "notes.txt").read_text() == "mine"

    ours = tmp_path / "ours"
    prepare_directory(ours, fresh=True)
    (ours / "old-run.log").write_text("x")
    prepare_directory(ours, fresh=False)
    assert (ours / "old-run.log").exists()  # kept for the UI command
    prepare_directory(ours, fresh=True)
    assert sorted(p.name for p in ours.iterdir()) == [MARKER]


def test_a_failed_job_says_the_errors_its_summary_recorded(tmp_path: Path) -> None:
    """A job's log shows what it did; why a step failed is in its summary's errors, and the
    demo's failure message carries both."""
    summary = tmp_path / "summary.json"
    script = (
        "import json, sys; print('restored partition=events-0', flush=True);"
        f" json.dump({{'errors': [{{'partition': None, 'error': 'config change refused'}}]}},"
        f" open({str(summary)!r}, 'w')); sys.exit(1)"
    )
    with pytest.raises(DisasterCheckError) as failed:
        run_job([sys.executable, "-c", script], tmp_path / "job.log", summary, tmp_path)
    message = str(failed.value)
    assert "exited 1" in message and "restored partition=events-0" in message
    assert "errors in its summary:\n  job: config change refused" in message
