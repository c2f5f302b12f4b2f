"""Helpers for the tiering operation tests: real logs, a real directory RSM, and RSM/RLMM
subclasses that fail or record on purpose (no mocks)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from storage_core.clock import ManualClock
from storage_core.common import TopicIdPartition, TopicPartition, Uuid
from storage_core.log.log import Log
from storage_core.log.log_config import LogConfig
from storage_core.tiered.in_memory_rlmm import InMemoryRemoteLogMetadataManager
from storage_core.tiered.local_tiered_storage import TEMP_SUFFIX, LocalTieredStorage
from storage_core.tiered.metadata.metadata import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
)
from storage_core.tiered.metadata.states import RemoteLogSegmentState
from storage_core.tiered.operations import LeaderEpochFence, LogView
from storage_core.tiered.remote_storage_manager import (
    LogSegmentData,
    RemoteLogSegmentMetadataLike,
    RemoteStorageError,
)
from tests.conftest import BASE_TIMESTAMP_MS, make_batch

RECORDS_PER_SEGMENT = 4
TOPIC_ID = Uuid.from_string("fQZ8ZtKuRjqUmbdf4t1OyQ")
TOPIC_PARTITION = TopicPartition("orders", 0)
TOPIC_ID_PARTITION = TopicIdPartition(TOPIC_ID, TOPIC_PARTITION)
BROKER_ID = 7


def tiered_config(**overrides: object) -> LogConfig:
    """One record per batch, one index entry per batch, ``RECORDS_PER_SEGMENT`` per segment."""
    settings: dict[str, object] = {
        "index_interval_bytes": 1,
        "segment_index_bytes": 12 * RECORDS_PER_SEGMENT,
        "remote_storage_enable": True,
    }
    settings.update(overrides)
    return LogConfig(**settings)  # type: ignore[arg-type]


def open_partition_log(log_dir: Path, clock: ManualClock, config: LogConfig | None = None) -> Log:
    return Log(
        log_dir / TOPIC_PARTITION.dir_name,
        config or tiered_config(),
        clock=clock,
        topic_id=TOPIC_ID,
    )


def append(log: Log, count: int, *, epoch: int, timestamp_ms: int | None = None) -> None:
    """``count`` one-record batches; timestamps grow by 1 ms per offset from ``timestamp_ms``
    (default: ``BASE_TIMESTAMP_MS`` + offset), so each batch adds a time index entry."""
    for _ in range(count):
        offset = log.log_end_offset
        timestamp = BASE_TIMESTAMP_MS + offset if timestamp_ms is None else timestamp_ms
        log.append_as_leader(
            make_batch(1, timestamp=timestamp, tag=f"e{epoch}-"), leader_epoch=epoch
        )
        if timestamp_ms is not None:
            timestamp_ms += 1


def view_of(log: Log, *, high_watermark: int | None = None) -> LogView:
    return LogView.read(
        log.dir,
        high_watermark=log.high_watermark if high_watermark is None else high_watermark,
        log_start_offset=log.log_start_offset,
    )


def fence_at(epoch: int, current: Callable[[], int] | None = None) -> LeaderEpochFence:
    return LeaderEpochFence(
        planned_leader_epoch=epoch, current_leader_epoch=current or (lambda: epoch)
    )


def stored_files(storage_dir: Path) -> list[str]:
    """Every file under the remote directory (objects and temp files)."""
    return sorted(
        p.relative_to(storage_dir).as_posix() for p in storage_dir.rglob("*") if p.is_file()
    )


class FailingAfterBytesStorage(LocalTieredStorage):
    """Uploads ``fail_after_bytes`` bytes, leaves the object it was writing half-written
    (as a temp file, like a crashed upload) and raises ``RemoteStorageError``."""

    def __init__(self, storage_dir: Path, *, fail_after_bytes: int) -> None:
        super().__init__(storage_dir, fsync=False)
        self.fail_after_bytes = fail_after_bytes
        self.uploaded_bytes = 0

    def _write_object(self, target: Path, source: Path | bytes) -> int:
        data = source if isinstance(source, bytes) else source.read_bytes()
        if self.uploaded_bytes + len(data) > self.fail_after_bytes:
            allowed = self.fail_after_bytes - self.uploaded_bytes
            partial = target.with_name(f"{target.name}.partial{TEMP_SUFFIX}")
            partial.write_bytes(data[:allowed])
            self.uploaded_bytes = self.fail_after_bytes
            raise RemoteStorageError(
                f"simulated network failure after {self.fail_after_bytes} bytes ({target})"
            )
        written = super()._write_object(target, source)
        self.uploaded_bytes += written
        return written


class FailingDeleteStorage(LocalTieredStorage):
    """Deletes fail while ``failing`` is true."""

    def __init__(self, storage_dir: Path) -> None:
        super().__init__(storage_dir, fsync=False)
        self.failing = True

    def delete_log_segment_data(
        self, remote_log_segment_metadata: RemoteLogSegmentMetadataLike
    ) -> None:
        if self.failing:
            raise RemoteStorageError("simulated: the store refuses deletes")
        super().delete_log_segment_data(remote_log_segment_metadata)


class RecordingRlmm(InMemoryRemoteLogMetadataManager):
    """Remembers every segment state published, as ``(segment uuid, state)``."""

    def __init__(self) -> None:
        super().__init__()
        self.segment_events: list[tuple[Uuid, RemoteLogSegmentState]] = []

    def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        super().add_remote_log_segment_metadata(metadata)
        self.segment_events.append((metadata.remote_log_segment_id.id, metadata.state))

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        super().update_remote_log_segment_metadata(update)
        self.segment_events.append((update.remote_log_segment_id.id, update.state))


class SimulatedCrashError(Exception):
    """The process "died" before publishing an event."""


class CrashingRlmm(InMemoryRemoteLogMetadataManager):
    """Publishes ``publishes_before_crash`` events, then raises on every later publish.
    Shares its caches with ``survivor`` (the metadata outlives the crashed process)."""

    def __init__(self, survivor: InMemoryRemoteLogMetadataManager, publishes_before_crash: int):
        super().__init__()
        self._caches = survivor._caches
        self._lock = survivor._lock
        self.remaining = publishes_before_crash

    def _maybe_crash(self) -> None:
        if self.remaining <= 0:
            raise SimulatedCrashError("crashed before publishing")
        self.remaining -= 1

    def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        self._maybe_crash()
        super().add_remote_log_segment_metadata(metadata)

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        self._maybe_crash()
        super().update_remote_log_segment_metadata(update)

    def put_remote_partition_delete_metadata(self, metadata: RemotePartitionDeleteMetadata) -> None:
        self._maybe_crash()
        super().put_remote_partition_delete_metadata(metadata)


def segment_data_paths(data: LogSegmentData) -> list[Path]:
    return [p for p in (data.log_segment, data.offset_index, data.time_index) if p is not None]
