"""The storage-core command as a user runs it: dump-log, describe-log-dir, demo."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from storage_core.cli import main
from storage_core.common import TopicPartition, Uuid
from storage_core.log.log_config import LogConfig
from storage_core.log.log_manager import LogManager
from tests.conftest import make_batch


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "logs"
    manager = LogManager([directory], LogConfig(segment_bytes=600, index_interval_bytes=100))
    manager.startup(background_tasks=False)
    log = manager.get_or_create_log(TopicPartition("orders", 0), topic_id=Uuid(0, 7))
    for epoch in (0, 0, 2, 2, 2):
        log.append_as_leader(make_batch(3, value_size=60), leader_epoch=epoch)
    log.update_high_watermark(log.log_end_offset)
    manager.shutdown()
    return directory


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    status = main(list(argv))
    return status, capsys.readouterr().out


def test_dump_log_prints_batches_and_records(log_dir: Path, capsys) -> None:
    segment = log_dir / "orders-0" / "00000000000000000000.log"
    status, out = run(capsys, "dump-log", str(segment), "--print-data")
    assert status == 0
    lines = out.splitlines()
    assert lines[0] == f"Dumping {segment}"
    assert lines[1].startswith("baseOffset: 0 lastOffset: 2 count: 3")
    assert "crcValid: true" in lines[1] and "compression: none" in lines[1]
    assert lines[2].startswith("| offset: 0 ")


def test_dump_log_json_and_corruption_report(log_dir: Path, capsys) -> None:
    segment = log_dir / "orders-0" / "00000000000000000000.log"
    data = bytearray(segment.read_bytes())
    data[-5] ^= 0x10
    segment.write_bytes(bytes(data))
    status, out = run(capsys, "dump-log", "--json", str(segment))
    rows = [json.loads(line) for line in out.splitlines()]
    batches = [r for r in rows if r["type"] == "batch"]
    assert [b["crc_valid"] for b in batches][-1] is False
    assert all(b["crc_valid"] for b in batches[:-1])
    assert status == 0  # a CRC mismatch is reported per batch, the file stays readable
    (segment.parent / "junk.log").write_bytes(make_batch(1) + b"\x00" * 20)
    status, out = run(capsys, "dump-log", str(segment.parent / "junk.log"))
    assert status == 3
    assert "Found corrupt data at position" in out


def test_dump_index_timeindex_and_epochs_with_verification(log_dir: Path, capsys) -> None:
    partition = log_dir / "orders-0"
    status, out = run(
        capsys,
        "dump-log",
        "--verify-index",
        str(partition / "00000000000000000000.index"),
        str(partition / "00000000000000000000.timeindex"),
        str(partition / "leader-epoch-checkpoint"),
    )
    assert status == 0, out
    assert "offset: " in out and "position: " in out and "timestamp: " in out
    assert "epoch: 0 startOffset: 0" in out and "epoch: 2 startOffset: 6" in out
    index = partition / "00000000000000000000.index"
    raw = bytearray(index.read_bytes())
    raw[7] ^= 0x01  # the first entry's position now points inside a batch
    index.write_bytes(bytes(raw))
    status, out = run(capsys, "dump-log", "--verify-index", str(index))
    assert status == 3
    assert "no batch starts at this position" in out or "differs" in out


def test_corrupt_epoch_checkpoint_is_corrupt_data_naming_file_and_line(
    log_dir: Path, capsys
) -> None:
    checkpoint = log_dir / "orders-0" / "leader-epoch-checkpoint"
    checkpoint.write_text("0\n2\n0 0\n2 six\n")
    status, out = run(capsys, "dump-log", str(checkpoint))
    assert status == 3, out  # corrupt data, not a usage error (2)
    assert f"Dumping {checkpoint}" in out
    assert "Found corrupt data:" in out and "line 4" in out and str(checkpoint) in out
    status, out = run(capsys, "dump-log", "--json", str(checkpoint))
    error = [json.loads(line) for line in out.splitlines()][-1]
    assert status == 3
    assert error["type"] == "error" and error["file"] == str(checkpoint)


def test_describe_log_dir(log_dir: Path, capsys) -> None:
    status, out = run(capsys, "describe-log-dir", "--json", str(log_dir))
    assert status == 0
    summary = json.loads(out)
    (partition,) = summary["partitions"]
    assert partition["partition"] == "orders-0"
    assert partition["topic_id"] == str(Uuid(0, 7))
    assert partition["log_end_offset"] == 15
    assert partition["high_watermark"] == 15
    assert partition["leader_epochs"] == [[0, 0], [2, 6]]
    assert summary["clean_shutdown"] is True
    assert sum(s["batches"] for s in partition["segments"]) == 5


def test_bad_paths_get_clear_errors(tmp_path: Path, capsys) -> None:
    status = main(["dump-log", str(tmp_path / "missing.log")])
    assert status == 2
    assert "is not a file" in capsys.readouterr().err
    other = tmp_path / "notes.txt"
    other.write_text("x")
    assert main(["dump-log", str(other)]) == 2
    assert "not a .log" in capsys.readouterr().err


def test_demo_runs_end_to_end(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "storage_core.cli",
            "demo",
            "--dir",
            str(tmp_path / "demo"),
            "--records",
            "3000",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "every acknowledged record intact: True" in proc.stdout
    assert "Demo succeeded" in proc.stdout
