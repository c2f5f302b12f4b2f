"""A writer killed with SIGKILL over and over loses no acknowledged (fsynced) batch."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from storage_core.common import TopicPartition
from storage_core.log.log_manager import LogManager
from tests.integration.crash_writer import CONFIG, record_value

ROOT = Path(__file__).resolve().parents[2]
ITERATIONS = 8


def _run_writer_until_killed(log_dir: Path, seed: int, run_for_s: float) -> tuple[int, int]:
    """Start the writer, kill it after ``run_for_s``; return (start offset, last acked offset)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.crash_writer", str(log_dir), str(seed)],
        stdout=subprocess.PIPE,
        cwd=ROOT,
        env=env,
        text=True,
    )
    assert proc.stdout is not None
    start_line = proc.stdout.readline()
    assert start_line.startswith("START"), start_line
    start = int(start_line.split()[1])
    deadline = time.monotonic() + run_for_s
    acked = start
    os.set_blocking(proc.stdout.fileno(), False)
    while time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    os.set_blocking(proc.stdout.fileno(), True)
    for line in proc.stdout.read().splitlines():
        if line.startswith("ACK"):
            acked = int(line.split()[1])
    return start, acked


def _check_log(log_dir: Path, acked: int) -> int:
    manager = LogManager([log_dir], CONFIG)
    manager.startup(background_tasks=False)
    try:
        log = manager.get_log(TopicPartition("crash", 0))
        assert log is not None
        assert log.log_end_offset >= acked, "an acknowledged batch was lost"
        expected_offset = 0
        for batch in log.read_batches(0):
            batch.ensure_valid()
            assert batch.base_offset == expected_offset, "offsets are not contiguous"
            for record in batch.records():
                assert record.value == record_value(record.offset)
            expected_offset = batch.last_offset + 1
        assert expected_offset == log.log_end_offset
        return log.log_end_offset
    finally:
        for log in manager.all_logs().values():
            log.close()  # leave it unclean so the writer's next start recovers again


def test_sigkill_loop_loses_no_acknowledged_batch(tmp_path: Path) -> None:
    rng = random.Random(405)
    log_dir = tmp_path / "logs"
    total_acked = 0
    for iteration in range(ITERATIONS):
        start, acked = _run_writer_until_killed(log_dir, iteration, rng.uniform(0.3, 1.2))
        assert start >= total_acked
        total_acked = acked
        end = _check_log(log_dir, acked)
        assert end >= acked
    assert total_acked > 0
