"""RemoteLogManager with ReplicaManager: the local deletion guard, tiered fetches for consumers
and replicas, a failing store, log start offset after remote deletion, roll on local
retention breach, latest-tiered, partition deletion."""

from __future__ import annotations

import asyncio
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from storage_core.common import TopicPartition, Uuid
from storage_core.errors import KafkaStorageError
from storage_core.log.log_config import LogConfig
from storage_core.log.log_manager import LogManager
from storage_core.records import RecordBatch
from storage_core.replication.delayed_fetch import FetchRequestPartition
from storage_core.replication.partition import Partition
from storage_core.replication.replica_manager import IO_THREADS, ReplicaManager
from storage_core.tiered.chunked.chunked_storage_manager import ChunkedRemoteStorageManager
from storage_core.tiered.metadata.cache import RemoteLogMetadataCache
from storage_core.tiered.metadata.metadata import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
)
from storage_core.tiered.metadata.states import (
    RemoteLogSegmentState,
    RemotePartitionDeleteState,
)
from storage_core.tiered.remote_log_manager import (
    LATEST_TIERED_TIMESTAMP,
    OffsetMovedToTieredStorageError,
    RemoteLogManager,
)
from storage_core.tiered.rsm_loader import load_remote_storage_manager
from tests.conftest import BASE_TIMESTAMP_MS, make_batch
from tests.unit.tiered_fixtures import TIP, TOPIC_ID, TieredLog, build_tiered_log, copy_segment

LOCAL_TP = TopicPartition("local-only", 0)
READER_THREADS = 2


class Broker:
    def __init__(self, tmp_path: Path, tiered: TieredLog) -> None:
        self.tiered = tiered
        self.log_manager = LogManager([tmp_path / "local-logs"], LogConfig())
        self.log_manager.startup(background_tasks=False)
        self.replicas = ReplicaManager(self.log_manager, local_broker_id=0)
        self.rlm = RemoteLogManager(
            broker_id=0,
            rsm=tiered.rsm,
            rlmm=tiered.rlmm,
            log_dir=tmp_path / "logs",
            index_cache_max_bytes=1 << 20,
            reader_threads=READER_THREADS,
            task_interval_ms=100,
        )
        self.replicas.remote_log_manager = self.rlm
        self.partition = Partition(TIP.topic_partition, TOPIC_ID, tiered.log, local_broker_id=0)
        self.partition.make_leader(leader_epoch=2, replicas=(0,), isr=(0,))
        self.replicas.add_partition(self.partition)
        self.rlm.on_partition_hosted(self.partition)
        local_log = self.log_manager.get_or_create_log(LOCAL_TP, topic_id=Uuid.random())
        local = Partition(
            LOCAL_TP, local_log.topic_id or Uuid.random(), local_log, local_broker_id=0
        )
        local.make_leader(leader_epoch=0, replicas=(0,), isr=(0,))
        local.append_records_to_leader(make_batch(3), required_acks=1)
        self.replicas.add_partition(local)

    def close(self) -> None:
        self.rlm.close()
        self.replicas.shutdown()
        self.log_manager.shutdown()

    def fetch(
        self, offsets: dict[TopicPartition, int], *, replica_id: int = -1, max_wait_ms: int = 500
    ) -> dict[TopicPartition, object]:
        requests = {
            tp: FetchRequestPartition(fetch_offset=offset, max_bytes=1 << 20)
            for tp, offset in offsets.items()
        }

        async def run() -> dict[TopicPartition, object]:
            self.replicas.bind_loop(asyncio.get_running_loop())
            return dict(
                await self.replicas.fetch_messages(
                    requests,
                    max_wait_ms=max_wait_ms,
                    min_bytes=1,
                    max_bytes=1 << 20,
                    replica_id=replica_id,
                )
            )

        return asyncio.run(run())


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    tiered = build_tiered_log(tmp_path, copy_segments=3)
    b = Broker(tmp_path, tiered)
    yield b
    b.close()
    tiered.log.close()


def test_guard_deletes_only_copied_segments_and_keeps_the_log_start(broker: Broker) -> None:
    log = broker.tiered.log
    closed_before = len(log.segments) - 1
    assert closed_before > 3
    log.delete_old_segments()
    last_copied = broker.tiered.copied[-1]
    assert log.local_log_start_offset == last_copied.end_offset + 1  # no hole
    assert log.log_start_offset == 0  # the remote tier still serves 0..
    assert broker.rlm.highest_remote_offset(log, TIP) == last_copied.end_offset


def test_without_a_guard_a_remote_enabled_log_keeps_its_segments(tmp_path: Path) -> None:
    tiered = build_tiered_log(tmp_path, copy_segments=0)
    try:
        assert tiered.log.delete_old_segments() == 0
    finally:
        tiered.log.close()


def test_consumer_fetch_below_local_start_reads_the_remote_tier(broker: Broker) -> None:
    broker.tiered.log.delete_old_segments()
    tp = TIP.topic_partition
    results = broker.fetch({tp: 0, LOCAL_TP: 0})
    tiered = results[tp]
    assert tiered.error is None  # type: ignore[attr-defined]
    first = RecordBatch.from_buffer(tiered.records)  # type: ignore[attr-defined]
    assert bytes(first.buffer) == broker.tiered.batch_at(0)
    assert tiered.read.log_start_offset == 0  # type: ignore[attr-defined]
    assert results[LOCAL_TP].records  # type: ignore[attr-defined]


def test_a_consumer_reading_the_remote_tier_does_not_wait_for_busy_io_threads(
    broker: Broker,
) -> None:
    """A fetch of tiered offsets only reads no local segment, so a local disk slow enough to
    hold every I/O thread does not hold it; a fetch that also reads a local log waits."""
    broker.tiered.log.delete_old_segments()
    tp = TIP.topic_partition
    requests = {
        tp: FetchRequestPartition(fetch_offset=0, max_bytes=1 << 20),
        LOCAL_TP: FetchRequestPartition(fetch_offset=0, max_bytes=1 << 20),
    }
    disk_free = threading.Event()

    async def run() -> tuple[object, bool]:
        replicas = broker.replicas
        replicas.bind_loop(asyncio.get_running_loop())
        stuck = [asyncio.ensure_future(replicas.run_io(disk_free.wait)) for _ in range(IO_THREADS)]
        await asyncio.sleep(0.05)  # every I/O thread is in the slow disk now
        try:
            tiered = await asyncio.wait_for(
                replicas.fetch_messages(
                    {tp: requests[tp]}, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20
                ),
                timeout=5,
            )
            mixed = asyncio.ensure_future(
                replicas.fetch_messages(requests, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20)
            )
            await asyncio.sleep(0.3)
            mixed_waited = not mixed.done()
        finally:
            disk_free.set()
            await asyncio.gather(*stuck)
        await mixed
        return tiered[tp], mixed_waited

    result, mixed_waited = asyncio.run(run())
    assert result.error is None  # type: ignore[attr-defined]
    first = RecordBatch.from_buffer(result.records)  # type: ignore[attr-defined]
    assert bytes(first.buffer) == broker.tiered.batch_at(0)
    assert mixed_waited  # the same fetch with a local partition needs an I/O thread


def test_a_consumer_reading_cached_chunks_needs_no_reader_thread(tmp_path: Path) -> None:
    """A fetch whose bytes are all in the chunk cache is answered from memory where it
    arrives, so it does not queue behind reads waiting for the store; a fetch that needs the
    store (a segment nobody has read) still waits for a reader thread."""
    rsm = load_remote_storage_manager(
        "LocalTieredStorage",
        {
            "rsm.config.local.storage.dir": str(tmp_path / "remote"),
            "rsm.config.local.fsync": "false",
        },
    )
    assert isinstance(rsm, ChunkedRemoteStorageManager)
    tiered = build_tiered_log(tmp_path, copy_segments=3, rsm=rsm)
    broker = Broker(tmp_path, tiered)
    try:
        tiered.log.delete_old_segments()
        tp = TIP.topic_partition
        first = broker.fetch({tp: 0})[tp]  # read by a reader thread, which caches the chunk
        assert bytes(RecordBatch.from_buffer(first.records).buffer) == tiered.batch_at(0)  # type: ignore[attr-defined]
        unread = tiered.copied[2].start_offset
        store_free = threading.Event()

        async def fetch_at(offset: int) -> dict[TopicPartition, object]:
            request = FetchRequestPartition(fetch_offset=offset, max_bytes=1 << 20)
            return dict(
                await broker.replicas.fetch_messages(
                    {tp: request}, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20
                )
            )

        async def run() -> tuple[object, bool]:
            broker.replicas.bind_loop(asyncio.get_running_loop())
            busy = [broker.rlm.reader.submit(store_free.wait) for _ in range(READER_THREADS)]
            try:
                cached = await asyncio.wait_for(fetch_at(0), timeout=5)
                uncached = asyncio.ensure_future(fetch_at(unread))
                await asyncio.sleep(0.3)
                uncached_waited = not uncached.done()
            finally:
                store_free.set()
                for future in busy:
                    future.result(timeout=5)
            await uncached
            return cached[tp], uncached_waited

        result, uncached_waited = asyncio.run(run())
        assert result.error is None  # type: ignore[attr-defined]
        assert bytes(RecordBatch.from_buffer(result.records).buffer) == tiered.batch_at(0)  # type: ignore[attr-defined]
        assert uncached_waited
        again = broker.fetch({tp: unread})[tp]
        assert bytes(RecordBatch.from_buffer(again.records).buffer) == tiered.batch_at(unread)  # type: ignore[attr-defined]
    finally:
        broker.close()
        tiered.log.close()


def test_replica_fetch_below_local_start_is_offset_moved_to_tiered_storage(
    broker: Broker,
) -> None:
    broker.tiered.log.delete_old_segments()
    tp = TIP.topic_partition
    result = broker.fetch({tp: 0}, replica_id=1)[tp]
    assert isinstance(result.error, OffsetMovedToTieredStorageError)  # type: ignore[attr-defined]
    assert result.error.error_code == "offset_moved_to_tiered_storage"  # type: ignore[attr-defined]
    # with the leader's offsets, as Kafka: the follower takes its log start offset from here
    log = broker.tiered.log
    read = result.read  # type: ignore[attr-defined]
    assert (read.log_start_offset, read.high_watermark, read.log_end_offset) == (
        0,
        log.high_watermark,
        log.log_end_offset,
    )
    assert result.records == b""  # type: ignore[attr-defined]


def test_a_follower_deletes_locally_only_what_its_rlmm_says_is_copied(tmp_path: Path) -> None:
    """Kafka's follower side of the RLM (highestOffsetInRemoteStorage from the RLMM): a
    follower's local retention never deletes a segment that is not copied, whoever copies."""
    tiered = build_tiered_log(tmp_path, copy_segments=2)
    log = tiered.log
    partition = Partition(TIP.topic_partition, TOPIC_ID, log, local_broker_id=1)
    partition.make_follower(leader_id=0, leader_epoch=2, replicas=(0, 1), isr=(0, 1))
    rlm = RemoteLogManager(
        broker_id=1,
        rsm=tiered.rsm,
        rlmm=tiered.rlmm,
        log_dir=tmp_path / "logs",
        index_cache_max_bytes=1 << 20,
        reader_threads=1,
        task_interval_ms=100,
    )
    try:
        rlm.on_partition_hosted(partition)
        assert not partition.is_leader
        log.delete_old_segments()
        assert log.local_log_start_offset == tiered.copied[-1].end_offset + 1
        assert log.log_start_offset == 0
        # the leader copies one more segment: the follower may delete it now, and no more
        third = tiered.copied[-1].end_offset + 1
        (segment,) = [s for s in log.segments if s.base_offset == third]
        tiered.copied.append(copy_segment(tiered, segment))
        log.delete_old_segments()
        assert log.local_log_start_offset == tiered.copied[-1].end_offset + 1
    finally:
        rlm.close()
        log.close()


def test_emptied_store_fails_only_that_partition_promptly_and_warns_once(
    broker: Broker, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    broker.tiered.log.delete_old_segments()
    shutil.rmtree(tmp_path / "remote")
    tp = TIP.topic_partition
    started = time.monotonic()
    results = broker.fetch({tp: 0, LOCAL_TP: 0}, max_wait_ms=5000)
    assert time.monotonic() - started < 2
    assert isinstance(results[tp].error, KafkaStorageError)  # type: ignore[attr-defined]
    # The segment is COPY_SEGMENT_FINISHED and its objects are gone: lost, not retriable.
    assert results[tp].error.error_code == "unknown_server_error"  # type: ignore[attr-defined]
    assert results[LOCAL_TP].error is None and results[LOCAL_TP].records  # type: ignore[attr-defined]
    for _ in range(20):
        assert broker.fetch({tp: 0}, max_wait_ms=5000)[tp].error is not None  # type: ignore[attr-defined]
    warnings = [r for r in caplog.records if r.levelname == "WARNING" and "lost" in r.message]
    assert len(warnings) == 1, [r.message for r in caplog.records]
    assert str(broker.tiered.copied[0].remote_log_segment_id.id) in warnings[0].message


def test_deleted_remote_segment_moves_the_log_start_offset(broker: Broker) -> None:
    log = broker.tiered.log
    log.delete_old_segments()
    first, second = broker.tiered.copied[:2]
    assert first.end_offset > first.start_offset
    broker.fetch({TIP.topic_partition: first.start_offset + 1})  # inside: the index is read
    assert first.remote_log_segment_id.id in broker.rlm.index_cache
    broker.tiered.rlmm.update_remote_log_segment_metadata(
        RemoteLogSegmentMetadataUpdate(
            remote_log_segment_id=first.remote_log_segment_id,
            event_timestamp_ms=BASE_TIMESTAMP_MS,
            state=RemoteLogSegmentState.DELETE_SEGMENT_STARTED,
            broker_id=0,
        )
    )
    broker.rlm.run_once()
    assert log.log_start_offset == second.start_offset
    assert log.leader_epoch_cache.epoch_entries()[0].start_offset == second.start_offset
    assert first.remote_log_segment_id.id not in broker.rlm.index_cache
    result = broker.fetch({TIP.topic_partition: 0})[TIP.topic_partition]
    assert result.error is not None  # type: ignore[attr-defined]
    assert result.error.error_code == "offset_out_of_range"  # type: ignore[attr-defined]


def test_latest_tiered_is_the_highest_remote_offset(broker: Broker, tmp_path: Path) -> None:
    found = broker.rlm.fetch_offset_for_timestamp(broker.partition, LATEST_TIERED_TIMESTAMP, None)
    assert found is not None
    assert found.offset == broker.tiered.copied[-1].end_offset
    bare = build_tiered_log(tmp_path / "bare", copy_segments=0)
    try:
        tip_free = RemoteLogManager(
            broker_id=0,
            rsm=bare.rsm,
            rlmm=bare.rlmm,
            log_dir=tmp_path / "bare",
            index_cache_max_bytes=1024,
            reader_threads=1,
            task_interval_ms=100,
        )
        partition = Partition(TIP.topic_partition, TOPIC_ID, bare.log, local_broker_id=0)
        none = tip_free.fetch_offset_for_timestamp(partition, LATEST_TIERED_TIMESTAMP, None)
        assert none is not None and (none.offset, none.leader_epoch) == (-1, None)
        tip_free.close()
    finally:
        bare.log.close()


def test_timestamp_lookup_searches_remote_segments_first(broker: Broker) -> None:
    broker.tiered.log.delete_old_segments()
    found = broker.rlm.fetch_offset_for_timestamp(broker.partition, BASE_TIMESTAMP_MS + 51, None)
    assert found is not None and found.offset == 6


def test_active_segment_is_not_rolled_while_the_local_retention_keeps_any_byte(
    broker: Broker,
) -> None:
    """Kafka rolls the active segment for size only when retention must take it whole
    (``local.retention.bytes=0``): with 1 byte, one record past it stays active."""
    log = broker.tiered.log
    base = log.active_segment.base_offset
    for retention_bytes in (1, log.active_segment.size - 1):
        log.config = replace(
            log.config, local_retention_bytes=retention_bytes, local_retention_ms=-1
        )
        assert not broker.rlm.maybe_roll_active_segment(log)
    assert log.active_segment.base_offset == base


def test_active_segment_breaching_local_retention_is_rolled(broker: Broker) -> None:
    log = broker.tiered.log
    log.config = replace(log.config, local_retention_bytes=0)
    base = log.active_segment.base_offset
    assert broker.rlm.maybe_roll_active_segment(log)
    assert log.active_segment.base_offset == log.log_end_offset > base
    assert not broker.rlm.maybe_roll_active_segment(log)  # the new active segment is empty


def test_deleted_topic_partitions_are_marked_for_remote_deletion(broker: Broker) -> None:
    broker.rlm.on_partitions_deleted([TIP])
    marked = broker.tiered.rlmm.remote_partition_delete_metadata(TIP)
    assert marked is not None
    assert marked.state is RemotePartitionDeleteState.DELETE_PARTITION_MARKED
    broker.rlm.on_partitions_deleted([TIP])  # repeating is idempotent


def test_task_rounds_read_the_segments_summary_not_a_listing(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every task interval asks about every partition; listing (and sorting) all its remote
    segments each time took the task thread most of its time at 10^5 segments."""
    listings: list[int] = []
    plain = RemoteLogMetadataCache.list_all_remote_log_segments

    def counted(self: RemoteLogMetadataCache) -> list[RemoteLogSegmentMetadata]:
        listings.append(1)
        return plain(self)

    monkeypatch.setattr(RemoteLogMetadataCache, "list_all_remote_log_segments", counted)
    first, second = broker.tiered.copied[:2]
    for _ in range(5):
        broker.rlm.run_once()
    assert broker.rlm.remote_log_start_offset(TIP) == first.start_offset
    broker.tiered.rlmm.update_remote_log_segment_metadata(
        RemoteLogSegmentMetadataUpdate(
            remote_log_segment_id=first.remote_log_segment_id,
            event_timestamp_ms=BASE_TIMESTAMP_MS,
            state=RemoteLogSegmentState.DELETE_SEGMENT_STARTED,
            broker_id=0,
        )
    )
    broker.tiered.log.delete_old_segments()
    broker.rlm.run_once()
    assert broker.tiered.log.log_start_offset == second.start_offset
    assert broker.rlm.remote_log_start_offset(TIP) == second.start_offset
    assert listings == []
