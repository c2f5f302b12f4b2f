"""A read-only summary of a log dir: partitions, segments, offsets and sizes.

Nothing is opened for writing and nothing is recovered, so it is safe to run against the log
dir of a live broker.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from storage_core.common import TopicPartition
from storage_core.errors import CorruptCheckpointError, CorruptRecordError, StorageError
from storage_core.log import log_file_utils as files
from storage_core.log.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    OffsetCheckpointFile,
)
from storage_core.log.leader_epoch_cache import (
    LEADER_EPOCH_CHECKPOINT_FILENAME,
    LeaderEpochCheckpointFile,
)
from storage_core.log.partition_metadata import PARTITION_METADATA_FILENAME, PartitionMetadataFile
from storage_core.records import FileRecords


def describe_log_dir(log_dir: Path) -> dict[str, Any]:
    if not log_dir.is_dir():
        raise StorageError(f"{log_dir} is not a directory")
    checkpoints = {
        "log_start_offset": _read(log_dir / LOG_START_OFFSET_CHECKPOINT),
        "recovery_point": _read(log_dir / RECOVERY_POINT_CHECKPOINT),
        "high_watermark": _read(log_dir / REPLICATION_OFFSET_CHECKPOINT),
    }
    partitions = []
    for entry in sorted(log_dir.iterdir()):
        if not entry.is_dir():
            continue
        try:
            tp = TopicPartition.parse_dir_name(entry.name)
        except StorageError:
            continue
        partitions.append(describe_partition(entry, tp, checkpoints))
    return {
        "log_dir": str(log_dir),
        "clean_shutdown": (log_dir / files.CLEAN_SHUTDOWN_FILE).exists(),
        "partitions": partitions,
    }


def _read(path: Path) -> dict[TopicPartition, int]:
    try:
        return OffsetCheckpointFile(path).read()
    except CorruptCheckpointError:
        return {}


def describe_partition(
    directory: Path, tp: TopicPartition, checkpoints: dict[str, dict[TopicPartition, int]]
) -> dict[str, Any]:
    segments = []
    problems = []
    for log_path in sorted(directory.glob("*" + files.LOG_FILE_SUFFIX)):
        try:
            base_offset = files.offset_from_file_name(log_path.name)
        except ValueError:
            continue
        records = FileRecords.open(log_path, mutable=False)
        first_offset = last_offset = None
        batches = 0
        try:
            for _position, header in records.batches(0):
                if first_offset is None:
                    first_offset = header.base_offset
                last_offset = header.last_offset
                batches += 1
        except CorruptRecordError as exc:
            problems.append(str(exc))
        finally:
            size = records.size_in_bytes
            records.close()
        segments.append(
            {
                "base_offset": base_offset,
                "size_bytes": size,
                "batches": batches,
                "first_offset": first_offset,
                "last_offset": last_offset,
            }
        )
    quarantined = sorted(p.name for p in directory.glob("*" + files.QUARANTINED_FILE_SUFFIX))
    epochs: list[list[int]] = []
    epoch_file = directory / LEADER_EPOCH_CHECKPOINT_FILENAME
    try:
        epochs = [[e.epoch, e.start_offset] for e in LeaderEpochCheckpointFile(epoch_file).read()]
    except CorruptCheckpointError as exc:
        problems.append(str(exc))
    topic_id = None
    metadata = PartitionMetadataFile(directory / PARTITION_METADATA_FILENAME)
    if metadata.exists():
        try:
            topic_id = str(metadata.read())
        except CorruptCheckpointError as exc:
            problems.append(str(exc))
    last_offsets = [s["last_offset"] for s in segments if s["last_offset"] is not None]
    log_end_offset = (
        (max(last_offsets) + 1)
        if last_offsets
        else (segments[-1]["base_offset"] if segments else 0)
    )
    return {
        "partition": str(tp),
        "topic_id": topic_id,
        "log_start_offset": checkpoints["log_start_offset"].get(tp),
        "recovery_point": checkpoints["recovery_point"].get(tp),
        "high_watermark": checkpoints["high_watermark"].get(tp),
        "log_end_offset": log_end_offset,
        "size_bytes": sum(s["size_bytes"] for s in segments),
        "segments": segments,
        "leader_epochs": epochs,
        "quarantined_files": quarantined,
        "problems": problems,
    }
