"""remote_log_snapshot: layout, atomic replace, corruption detection and fall-back to replay."""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c
import pytest

from storage_core.common import TopicIdPartition, TopicPartition, Uuid
from storage_core.tiered.metadata import (
    CorruptRemoteLogMetadataSnapshotError,
    RemoteLogMetadataCache,
    RemoteLogMetadataSnapshotFile,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataSnapshot,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
)
from storage_core.tiered.metadata.serde import serialize
from storage_core.tiered.metadata.snapshot_file import (
    REMOTE_LOG_SNAPSHOT_FILE_NAME,
    decode_snapshot,
    encode_snapshot,
    maybe_restore_cache,
    snapshot_of,
)

S = RemoteLogSegmentState
TIP = TopicIdPartition(Uuid.from_string("k8YHc0mdT2a4dG1nbbcX2w"), TopicPartition("orders", 2))


def segment(start: int, end: int, epochs: dict[int, int], n: int) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId(topic_id_partition=TIP, id=Uuid(n, n)),
        start_offset=start,
        end_offset=end,
        max_timestamp_ms=start,
        broker_id=1,
        event_timestamp_ms=5,
        segment_size_in_bytes=100,
        segment_leader_epochs=epochs,
        custom_metadata=b"cm" if n % 2 else None,
    )


def move(cache: RemoteLogMetadataCache, s: RemoteLogSegmentMetadata, *states: S) -> None:
    for state in states:
        cache.update_remote_log_segment_metadata(
            RemoteLogSegmentMetadataUpdate(
                remote_log_segment_id=s.remote_log_segment_id,
                event_timestamp_ms=9,
                state=state,
                broker_id=2,
            )
        )


def busy_cache() -> RemoteLogMetadataCache:
    """Every kind of state: copying, copied, displaced, being deleted, deleted, marked."""
    cache = RemoteLogMetadataCache(TIP)
    segments = [
        segment(0, 100, {0: 0, 1: 20}, 1),
        segment(0, 200, {0: 0, 1: 20, 2: 150}, 2),  # displaces segment 1
        segment(201, 300, {2: 201}, 3),
        segment(301, 400, {3: 301}, 4),
        segment(401, 500, {3: 401}, 5),
    ]
    for s in segments:
        cache.add_copy_in_progress_segment(s)
    move(cache, segments[0], S.COPY_SEGMENT_FINISHED)
    move(cache, segments[1], S.COPY_SEGMENT_FINISHED)
    move(cache, segments[2], S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED)
    move(cache, segments[3], S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED)
    move(cache, segments[3], S.DELETE_SEGMENT_FINISHED)
    cache.put_remote_partition_delete_metadata(
        RemotePartitionDeleteMetadata(
            topic_id_partition=TIP,
            state=RemotePartitionDeleteState.DELETE_PARTITION_MARKED,
            event_timestamp_ms=1,
            broker_id=3,
        )
    )
    return cache


def observable(cache: RemoteLogMetadataCache) -> object:
    return (
        cache.list_all_remote_log_segments(),
        {e: cache.list_remote_log_segments(e) for e in range(5)},
        {e: cache.highest_offset_for_epoch(e) for e in range(5)},
        {
            (e, o): cache.remote_log_segment_metadata(e, o)
            for e in range(5)
            for o in range(0, 520, 7)
        },
        cache.remote_partition_delete_metadata(),
        cache.leader_epochs(),
    )


def test_layout_is_kafkas_header_and_records_plus_crc_and_epoch_state() -> None:
    cache = RemoteLogMetadataCache(TIP)
    s = segment(0, 10, {4: 0}, 1)
    cache.add_copy_in_progress_segment(s)
    move(cache, s, S.COPY_SEGMENT_FINISHED)
    data = encode_snapshot(snapshot_of(cache, metadata_partition=17, metadata_partition_offset=41))
    entry = serialize(
        RemoteLogSegmentMetadataSnapshot.create(cache.list_all_remote_log_segments()[0])
    )
    body = (
        struct.pack(
            ">qqiiqi",
            TIP.topic_id.most_significant_bits,
            TIP.topic_id.least_significant_bits,
            2,
            17,
            41,
            1,
        )
        + struct.pack(">i", len(entry))
        + entry
        + struct.pack(">i", 1)  # one epoch
        + struct.pack(">iqi", 4, 10, 1)  # epoch 4, highest offset 10, one reference
        + struct.pack(">qqq", 0, 1, 1)  # offset 0 -> segment Uuid(1, 1)
    )
    assert data == struct.pack(">hI", 2, crc32c.crc32c(body)) + body
    assert entry[:3] == b"\x01\x03\x00"  # api key 3: RemoteLogSegmentMetadataSnapshotRecord


def test_an_epoch_closed_where_it_opened_keeps_its_highest_offset_minus_one() -> None:
    # epochs 0 and 1 both start at offset 0: epoch 0 ends at -1, which version 1 wrote as its
    # "none" and so restored as no offset copied of epoch 0
    cache = RemoteLogMetadataCache(TIP)
    s = segment(0, 0, {0: 0, 1: 0}, 1)
    cache.add_copy_in_progress_segment(s)
    move(cache, s, S.COPY_SEGMENT_FINISHED)
    assert cache.highest_offset_for_epoch(0) == -1
    data = encode_snapshot(snapshot_of(cache, metadata_partition=0, metadata_partition_offset=9))
    restored = RemoteLogMetadataCache.restore(TIP, decode_snapshot(data, TIP).state)
    assert restored.highest_offset_for_epoch(0) == -1
    assert observable(restored) == observable(cache)


def test_a_version_1_snapshot_is_still_read_with_its_minus_one_as_none() -> None:
    cache = RemoteLogMetadataCache(TIP)
    cache.add_copy_in_progress_segment(segment(0, 10, {4: 0}, 1))  # epoch 4: nothing copied
    data = encode_snapshot(snapshot_of(cache, metadata_partition=0, metadata_partition_offset=9))
    body = data[struct.calcsize(">hI") :]
    none_v2 = struct.pack(">iqi", 4, -(2**63), 0)
    assert body.count(none_v2) == 1
    body_v1 = body.replace(none_v2, struct.pack(">iqi", 4, -1, 0))
    v1 = struct.pack(">hI", 1, crc32c.crc32c(body_v1)) + body_v1
    restored = RemoteLogMetadataCache.restore(TIP, decode_snapshot(v1, TIP).state)
    assert restored.highest_offset_for_epoch(4) is None
    assert observable(restored) == observable(cache)


def test_round_trip_restores_an_identical_cache(tmp_path: Path) -> None:
    cache = busy_cache()
    snapshot_file = RemoteLogMetadataSnapshotFile(tmp_path, TIP)
    snapshot_file.write(snapshot_of(cache, metadata_partition=3, metadata_partition_offset=1234))
    assert sorted(p.name for p in tmp_path.iterdir()) == [REMOTE_LOG_SNAPSHOT_FILE_NAME]
    read = snapshot_file.read()
    assert read is not None and read.metadata_partition_offset == 1234
    assert read.state == cache.snapshot_state()
    restored, next_offset = maybe_restore_cache(snapshot_file, metadata_partition=3)
    assert next_offset == 1235
    assert observable(restored) == observable(cache)
    assert restored.snapshot_state() == cache.snapshot_state()
    assert not restored.is_initialized()


def test_missing_or_empty_file_means_replay_from_zero(tmp_path: Path) -> None:
    snapshot_file = RemoteLogMetadataSnapshotFile(tmp_path, TIP)
    assert snapshot_file.read() is None
    (tmp_path / REMOTE_LOG_SNAPSHOT_FILE_NAME).write_bytes(b"")
    assert snapshot_file.read() is None
    cache, next_offset = maybe_restore_cache(snapshot_file, metadata_partition=0)
    assert next_offset == 0 and cache.list_all_remote_log_segments() == []


def test_every_flipped_byte_and_truncation_is_detected() -> None:
    data = encode_snapshot(snapshot_of(busy_cache(), 3, 99))
    for position in range(len(data)):
        damaged = bytearray(data)
        damaged[position] ^= 0x40
        with pytest.raises(CorruptRemoteLogMetadataSnapshotError):
            decode_snapshot(bytes(damaged), TIP)
    for length in range(len(data)):
        with pytest.raises(CorruptRemoteLogMetadataSnapshotError):
            decode_snapshot(data[:length], TIP)


def test_structural_errors_are_named_even_with_a_valid_crc() -> None:
    data = encode_snapshot(snapshot_of(busy_cache(), 3, 99))

    def recrc(body: bytes) -> bytes:
        return struct.pack(">hI", 1, crc32c.crc32c(body)) + body

    body = data[6:]
    with pytest.raises(CorruptRemoteLogMetadataSnapshotError, match="garbage"):
        decode_snapshot(recrc(body + b"\x00"), TIP)
    with pytest.raises(CorruptRemoteLogMetadataSnapshotError, match="entries count"):
        decode_snapshot(recrc(body[:32] + struct.pack(">i", 1 << 30) + body[36:]), TIP)
    with pytest.raises(CorruptRemoteLogMetadataSnapshotError, match="version 0"):
        decode_snapshot(struct.pack(">h", 0) + data[2:], TIP)
    other = TopicIdPartition(TIP.topic_id, TopicPartition("orders", 3))
    with pytest.raises(CorruptRemoteLogMetadataSnapshotError, match="orders-3"):
        decode_snapshot(data, other)


def test_corrupt_or_foreign_snapshot_falls_back_to_replay(tmp_path: Path) -> None:
    snapshot_file = RemoteLogMetadataSnapshotFile(tmp_path, TIP)
    snapshot_file.write(snapshot_of(busy_cache(), 3, 99))
    cache, next_offset = maybe_restore_cache(snapshot_file, metadata_partition=4)
    assert next_offset == 0 and cache.list_all_remote_log_segments() == []
    path = tmp_path / REMOTE_LOG_SNAPSHOT_FILE_NAME
    damaged = bytearray(path.read_bytes())
    damaged[-1] ^= 1
    path.write_bytes(bytes(damaged))
    with pytest.raises(CorruptRemoteLogMetadataSnapshotError, match="CRC32C"):
        snapshot_file.read()
    cache, next_offset = maybe_restore_cache(snapshot_file, metadata_partition=3)
    assert next_offset == 0 and cache.list_all_remote_log_segments() == []
    # The next write replaces the damaged file.
    snapshot_file.write(snapshot_of(busy_cache(), 3, 150))
    assert maybe_restore_cache(snapshot_file, metadata_partition=3)[1] == 151


def test_inconsistent_epoch_state_is_refused_on_restore() -> None:
    cache = busy_cache()
    state = cache.snapshot_state()
    broken_epoch = state.epochs[0]
    bad = type(broken_epoch)(
        leader_epoch=broken_epoch.leader_epoch,
        highest_log_offset=broken_epoch.highest_log_offset,
        referenced=[(7, Uuid(99, 99))],
    )
    with pytest.raises(ValueError, match="not a copied segment"):
        RemoteLogMetadataCache.restore(TIP, type(state)(segments=state.segments, epochs=[bad]))


def test_write_refuses_a_snapshot_of_another_partition(tmp_path: Path) -> None:
    other = TopicIdPartition(TIP.topic_id, TopicPartition("orders", 9))
    with pytest.raises(ValueError, match="orders-9"):
        RemoteLogMetadataSnapshotFile(tmp_path, other).write(snapshot_of(busy_cache(), 0, 0))
