"""A real log whose closed segments are copied to ``LocalTieredStorage`` with their metadata
published to an in-memory RLMM, for the remote reader, index cache and RLM tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from storage_core.common import TopicIdPartition, TopicPartition, Uuid
from storage_core.log.log import Log
from storage_core.log.log_config import LogConfig
from storage_core.log.log_segment import LogSegment
from storage_core.records import RecordBatch
from storage_core.tiered.chunked.chunked_storage_manager import ChunkedRemoteStorageManager
from storage_core.tiered.in_memory_rlmm import InMemoryRemoteLogMetadataManager
from storage_core.tiered.local_tiered_storage import LocalTieredStorage
from storage_core.tiered.metadata.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
)
from storage_core.tiered.metadata.states import RemoteLogSegmentState
from storage_core.tiered.remote_storage_manager import LogSegmentData
from tests.conftest import BASE_TIMESTAMP_MS, make_batch

TOPIC = "tiered"
TOPIC_ID = Uuid(0x1111, 0x2222)
TIP = TopicIdPartition(TOPIC_ID, TopicPartition(TOPIC, 0))
BATCHES = 40
RECORDS_PER_BATCH = 5
VALUE_BYTES = 100


@dataclass
class TieredLog:
    log: Log
    rsm: LocalTieredStorage | ChunkedRemoteStorageManager
    rlmm: InMemoryRemoteLogMetadataManager
    copied: list[RemoteLogSegmentMetadata] = field(default_factory=list)
    # Every batch appended, by base offset (the oracle).
    batches: dict[int, bytes] = field(default_factory=dict)

    def batch_at(self, offset: int) -> bytes:
        base = max(b for b in self.batches if b <= offset)
        return self.batches[base]


def build_tiered_log(
    tmp_path: Path,
    *,
    batches: int = BATCHES,
    segment_bytes: int = 4096,
    copy_segments: int | None = None,
    remote_storage_enable: bool = True,
    rsm: ChunkedRemoteStorageManager | None = None,
) -> TieredLog:
    """A log of ``batches`` batches (5 records of 100 bytes each, timestamps increasing by 10
    per record) in several segments; the first ``copy_segments`` closed segments (all by
    default) are copied and COPY_SEGMENT_FINISHED, in the plain format unless ``rsm`` is
    given."""
    config = LogConfig(
        segment_bytes=segment_bytes,
        index_interval_bytes=256,
        remote_storage_enable=remote_storage_enable,
        local_retention_bytes=1,
    )
    log = Log(tmp_path / "logs" / f"{TOPIC}-0", config, topic_id=TOPIC_ID)
    tiered = TieredLog(
        log=log,
        rsm=rsm or LocalTieredStorage(tmp_path / "remote", fsync=False),
        rlmm=InMemoryRemoteLogMetadataManager(),
    )
    for i in range(batches):
        epoch = 0 if i < batches // 2 else 1
        data = make_batch(
            RECORDS_PER_BATCH,
            value_size=VALUE_BYTES,
            tag=f"b{i}-",
            timestamp=BASE_TIMESTAMP_MS + i * RECORDS_PER_BATCH * 10,
        )
        info = log.append_as_leader(data, leader_epoch=epoch)
        tiered.batches[info.first_offset] = _stored_batch(log, info.first_offset)
    log.update_high_watermark(log.log_end_offset)
    closed = log.segments[:-1]
    for segment in closed[: len(closed) if copy_segments is None else copy_segments]:
        tiered.copied.append(copy_segment(tiered, segment))
    return tiered


def _stored_batch(log: Log, offset: int) -> bytes:
    batch: RecordBatch = next(log.read_batches(offset))
    return bytes(batch.buffer)


def copy_segment(tiered: TieredLog, segment: LogSegment) -> RemoteLogSegmentMetadata:
    log = tiered.log
    segments = log.segments
    index = [s.base_offset for s in segments].index(segment.base_offset)
    end_offset = segments[index + 1].base_offset - 1
    entries = log.leader_epoch_cache.epoch_entries()
    kept: dict[int, int] = {}
    for i, entry in enumerate(entries):
        next_start = entries[i + 1].start_offset if i + 1 < len(entries) else None
        if entry.start_offset > end_offset:
            break
        if next_start is not None and next_start <= segment.base_offset:
            continue
        kept[entry.epoch] = max(entry.start_offset, segment.base_offset)
    segment.flush()
    metadata = RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId.generate_new(TIP),
        start_offset=segment.base_offset,
        end_offset=end_offset,
        max_timestamp_ms=segment.max_timestamp_so_far,
        broker_id=0,
        event_timestamp_ms=BASE_TIMESTAMP_MS,
        segment_size_in_bytes=segment.size,
        segment_leader_epochs=kept,
    )
    tiered.rlmm.add_remote_log_segment_metadata(metadata)
    tiered.rsm.copy_log_segment_data(
        metadata,
        LogSegmentData(
            log_segment=segment.log.path,
            offset_index=segment.offset_index.path,
            time_index=segment.time_index.path,
        ),
    )
    tiered.rlmm.update_remote_log_segment_metadata(
        RemoteLogSegmentMetadataUpdate(
            remote_log_segment_id=metadata.remote_log_segment_id,
            event_timestamp_ms=BASE_TIMESTAMP_MS,
            state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
            broker_id=0,
        )
    )
    return metadata


def finished(metadata: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadata:
    return metadata.create_with_updates(
        RemoteLogSegmentMetadataUpdate(
            remote_log_segment_id=metadata.remote_log_segment_id,
            event_timestamp_ms=BASE_TIMESTAMP_MS,
            state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
            broker_id=0,
        )
    )
