"""``tests.process_pause``: a paused process runs none of its threads until resumed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.process_pause import is_stopped, pause

# Two threads each bump a counter file as fast as they can, written in place (a file
# truncated and written again is read empty more often than not).
COUNTING = """
import os, sys, threading
def count(path):
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    n = 0
    while True:
        n += 1
        os.pwrite(fd, str(n).rjust(20).encode(), 0)
threads = [threading.Thread(target=count, args=(p,)) for p in sys.argv[1:]]
for t in threads:
    t.start()
"""


def test_a_paused_process_runs_no_thread_until_continued(tmp_path: Path) -> None:
    counters = [tmp_path / "a", tmp_path / "b"]
    child = subprocess.Popen([sys.executable, "-c", COUNTING, *map(str, counters)])
    try:
        while not all(c.exists() and c.read_text() for c in counters):
            time.sleep(0.01)
        pause(child.pid)
        assert is_stopped(child.pid)
        counts = [c.read_text() for c in counters]
        time.sleep(0.2)
        assert [c.read_text() for c in counters] == counts
        os.kill(child.pid, signal.SIGCONT)
        time.sleep(0.2)
        assert not is_stopped(child.pid)
        assert [c.read_text() for c in counters] != counts
    finally:
        child.kill()
        child.wait()


def test_a_process_gone_is_named() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    with pytest.raises(ProcessLookupError):
        pause(child.pid)
