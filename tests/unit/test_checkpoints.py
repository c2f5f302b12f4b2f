"""Offset checkpoints and partition.metadata: exact text, round trips, corruption, atomicity."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from storage_core.common import ZERO_UUID, TopicPartition, Uuid
from storage_core.errors import (
    CheckpointWriteError,
    CorruptCheckpointError,
    InconsistentTopicIdError,
    InvalidTopicError,
    KafkaStorageError,
)
from storage_core.log.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    OffsetCheckpointFile,
    write_atomically,
)
from storage_core.log.partition_metadata import (
    PARTITION_METADATA_FILENAME,
    PartitionMetadataFile,
)


def test_file_names_match_kafka() -> None:
    assert REPLICATION_OFFSET_CHECKPOINT == "replication-offset-checkpoint"
    assert RECOVERY_POINT_CHECKPOINT == "recovery-point-offset-checkpoint"
    assert LOG_START_OFFSET_CHECKPOINT == "log-start-offset-checkpoint"
    assert PARTITION_METADATA_FILENAME == "partition.metadata"


def test_offset_checkpoint_exact_text_is_sorted(tmp_path: Path) -> None:
    path = tmp_path / RECOVERY_POINT_CHECKPOINT
    OffsetCheckpointFile(path).write({TopicPartition("foo", 1): 7, TopicPartition("foo", 0): 5})
    assert path.read_bytes() == b"0\n2\nfoo 0 5\nfoo 1 7\n"


def test_offset_checkpoint_round_trip_with_dashes_and_dots(tmp_path: Path) -> None:
    offsets = {
        TopicPartition("my-topic.v2", 0): 0,
        TopicPartition("my-topic.v2", 10): 2**63 - 1,
        TopicPartition("a-1", 3): 42,
        TopicPartition("__consumer_offsets", 49): -1,
    }
    checkpoint = OffsetCheckpointFile(tmp_path / REPLICATION_OFFSET_CHECKPOINT)
    checkpoint.write(offsets)
    assert checkpoint.read() == offsets
    assert "my-topic.v2 10 9223372036854775807\n" in checkpoint.path.read_text()


def test_empty_map_writes_header_only(tmp_path: Path) -> None:
    checkpoint = OffsetCheckpointFile(tmp_path / LOG_START_OFFSET_CHECKPOINT)
    checkpoint.write({})
    assert checkpoint.path.read_text() == "0\n0\n"
    assert checkpoint.read() == {}


def test_missing_or_empty_file_reads_as_no_entries(tmp_path: Path) -> None:
    path = tmp_path / RECOVERY_POINT_CHECKPOINT
    assert OffsetCheckpointFile(path).read() == {}
    assert not path.exists()
    path.write_text("")
    assert OffsetCheckpointFile(path).read() == {}
    path.write_text("0\n")
    assert OffsetCheckpointFile(path).read() == {}


def test_windows_line_ends_are_read(tmp_path: Path) -> None:
    path = tmp_path / RECOVERY_POINT_CHECKPOINT
    path.write_bytes(b"0\r\n1\r\nfoo 0 5\r\n")
    assert OffsetCheckpointFile(path).read() == {TopicPartition("foo", 0): 5}


def test_atomic_write_replaces_and_leaves_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / REPLICATION_OFFSET_CHECKPOINT
    checkpoint = OffsetCheckpointFile(path)
    checkpoint.write({TopicPartition("t", 0): 1})
    checkpoint.write({TopicPartition("t", 0): 2})
    assert sorted(p.name for p in tmp_path.iterdir()) == [REPLICATION_OFFSET_CHECKPOINT]
    assert checkpoint.read() == {TopicPartition("t", 0): 2}


def test_failed_write_keeps_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "dir" / "file"
    with pytest.raises(CheckpointWriteError, match="file") as excinfo:
        write_atomically(path, "x")  # parent directory missing
    assert isinstance(excinfo.value, KafkaStorageError)
    target = tmp_path / "target"
    target.write_text("old")
    (tmp_path / "target.tmp").mkdir()  # the temp file cannot be created
    with pytest.raises(CheckpointWriteError):
        write_atomically(target, "new")
    assert target.read_text() == "old"


def test_write_refuses_topics_that_could_not_be_read_back(tmp_path: Path) -> None:
    checkpoint = OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT)
    with pytest.raises(InvalidTopicError):
        checkpoint.write({TopicPartition("a b", 0): 1})
    assert not checkpoint.path.exists()


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("1\n1\nfoo 0 5\n", "version 1"),
        ("x\n1\nfoo 0 5\n", "line 1"),
        ("0\n2\nfoo 0 5\n", "Expected 2 entries"),
        ("0\n1\nfoo 0 5\nfoo 1 6\n", "Expected 1 entries"),
        ("0\nmany\nfoo 0 5\n", "line 2"),
        ("0\n1\nfoo zero 5\n", "line 3"),
        ("0\n1\nfoo 0 five\n", "line 3"),
        ("0\n1\nfoo 0\n", "line 3"),
        ("0\n1\nfoo 0 5 6\n", "line 3"),
        ("0\n2\nfoo 0 5\n\n", "line 4"),
        ("0\n1\nfoo 0 99999999999999999999\n", "line 3"),
        ("0\n1\nfoo 0 1_000\n", "line 3"),
    ],
)
def test_corrupt_offset_checkpoints_name_the_file(
    tmp_path: Path, content: str, expected: str
) -> None:
    path = tmp_path / RECOVERY_POINT_CHECKPOINT
    path.write_text(content)
    with pytest.raises(CorruptCheckpointError, match=expected) as excinfo:
        OffsetCheckpointFile(path).read()
    assert str(path) in str(excinfo.value)


def test_invalid_utf8_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / RECOVERY_POINT_CHECKPOINT
    path.write_bytes(b"0\n1\n\xff 0 1\n")
    with pytest.raises(CorruptCheckpointError, match="UTF-8"):
        OffsetCheckpointFile(path).read()


def test_trailing_whitespace_is_accepted_like_kafka(tmp_path: Path) -> None:
    path = tmp_path / RECOVERY_POINT_CHECKPOINT
    path.write_text("0\n1\nfoo\t0  5 \n")
    assert OffsetCheckpointFile(path).read() == {TopicPartition("foo", 0): 5}


# ---------------------------------------------------------------------- partition.metadata
TOPIC_ID = Uuid.from_string("vDZRHcQXQyGvc1EESx0E4g")


def test_partition_metadata_exact_text_and_round_trip(tmp_path: Path) -> None:
    path = tmp_path / PARTITION_METADATA_FILENAME
    metadata = PartitionMetadataFile(path)
    assert not metadata.exists()
    metadata.record(TOPIC_ID)
    assert not metadata.exists()  # recorded in memory until flushed
    metadata.maybe_flush()
    assert path.read_bytes() == b"version: 0\ntopic_id: vDZRHcQXQyGvc1EESx0E4g"
    assert PartitionMetadataFile(path).read() == TOPIC_ID
    assert sorted(p.name for p in tmp_path.iterdir()) == [PARTITION_METADATA_FILENAME]


def test_partition_metadata_accepts_a_trailing_newline(tmp_path: Path) -> None:
    path = tmp_path / PARTITION_METADATA_FILENAME
    path.write_text(f"version: 0\ntopic_id: {TOPIC_ID}\n")
    assert PartitionMetadataFile(path).read() == TOPIC_ID


def test_partition_metadata_refuses_a_different_topic_id(tmp_path: Path) -> None:
    path = tmp_path / PARTITION_METADATA_FILENAME
    metadata = PartitionMetadataFile(path)
    metadata.record(TOPIC_ID)
    metadata.record(TOPIC_ID)
    other = Uuid.random()
    with pytest.raises(InconsistentTopicIdError, match=str(TOPIC_ID)):
        metadata.record(other)
    metadata.maybe_flush()
    # A fresh instance compares against the id stored on disk.
    with pytest.raises(InconsistentTopicIdError):
        PartitionMetadataFile(path).record(other)
    again = PartitionMetadataFile(path)
    again.record(TOPIC_ID)
    mtime = path.stat().st_mtime_ns
    again.maybe_flush()  # already stored: nothing rewritten
    assert path.stat().st_mtime_ns == mtime


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("version: 1\ntopic_id: vDZRHcQXQyGvc1EESx0E4g", "unrecognized version 1"),
        ("version: x\ntopic_id: vDZRHcQXQyGvc1EESx0E4g", "integer version"),
        ("version 0\ntopic_id: vDZRHcQXQyGvc1EESx0E4g", "line 1"),
        ("version: 0\n", "line 2"),
        ("version: 0\ntopic_id: not-a-uuid", "line 2"),
        ("version: 0\ntopic: vDZRHcQXQyGvc1EESx0E4g", "line 2"),
        (f"version: 0\ntopic_id: {ZERO_UUID}", "zero id"),
        ("", "line 1"),
    ],
)
def test_corrupt_partition_metadata_names_the_problem(
    tmp_path: Path, content: str, expected: str
) -> None:
    path = tmp_path / PARTITION_METADATA_FILENAME
    path.write_text(content)
    with pytest.raises(CorruptCheckpointError, match=expected) as excinfo:
        PartitionMetadataFile(path).read()
    assert str(path) in str(excinfo.value)


def test_missing_partition_metadata_is_a_storage_error(tmp_path: Path) -> None:
    with pytest.raises(KafkaStorageError, match=PARTITION_METADATA_FILENAME):
        PartitionMetadataFile(tmp_path / PARTITION_METADATA_FILENAME).read()


def test_checkpoint_write_is_durable_before_return(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT).write({TopicPartition("t", 0): 3})
    assert len(synced) == 2  # the temp file, then the directory
