"""ConsumerTask over real metadata-partition Logs: apply, skip, read-your-writes, restart."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage_core.common import TopicIdPartition, TopicPartition, Uuid
from storage_core.log.log import Log
from storage_core.log.log_config import LogConfig
from storage_core.records import SimpleRecord, build_batch
from storage_core.tiered.metadata import (
    IllegalRemoteLogStateTransitionError,
    RemoteLogMetadata,
    RemoteLogMetadataSerde,
    RemoteLogMetadataTopicPartitioner,
    RemoteLogSegmentState,
    RemotePartitionDeleteState,
)
from storage_core.tiered.metadata.snapshot_file import REMOTE_LOG_SNAPSHOT_FILE_NAME
from storage_core.tiered.topic_based_rlmm import (
    COMMITTED_OFFSETS_FILE_NAME,
    REMOTE_LOG_METADATA_TOPIC_NAME,
    CommittedOffsetsFile,
    ConsumerTask,
    ConsumerTaskConfig,
    LocalLogMetadataReader,
    MetadataRead,
    RemoteLogMetadataConsumeTimeoutError,
    TopicBasedRemoteLogMetadataManager,
)
from tests.remote_log_metadata_events import copy_started, partition_delete, state_update

S = RemoteLogSegmentState
NUM_METADATA_PARTITIONS = 3
PARTITIONER = RemoteLogMetadataTopicPartitioner(NUM_METADATA_PARTITIONS)


def partitions_on(metadata_partition: int, count: int) -> list[TopicIdPartition]:
    """``count`` user partitions whose events go to ``metadata_partition``."""
    found = []
    index = 1
    while len(found) < count:
        tip = TopicIdPartition(Uuid(index, index * 7919), TopicPartition(f"t{index}", 0))
        if PARTITIONER.metadata_partition(tip) == metadata_partition:
            found.append(tip)
        index += 1
    return found


class MetadataTopic:
    """The metadata partitions as Logs under ``<dir>/__remote_log_metadata-<n>``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.logs: dict[int, Log] = {}
        self.open()

    def open(self) -> None:
        for partition in range(NUM_METADATA_PARTITIONS):
            self.logs[partition] = Log(
                self.directory / f"{REMOTE_LOG_METADATA_TOPIC_NAME}-{partition}", LogConfig()
            )
            self.logs[partition].update_high_watermark(self.logs[partition].log_end_offset)

    def close(self) -> None:
        for log in self.logs.values():
            log.close()

    def publish(self, event: RemoteLogMetadata) -> tuple[int, int]:
        """Append as a leader and commit (HW = LEO): ``(metadata partition, offset)``."""
        partition = PARTITIONER.metadata_partition(event.topic_id_partition)  # type: ignore[union-attr]
        return partition, self.append(partition, RemoteLogMetadataSerde.serialize(event))

    def append(self, partition: int, value: bytes | None) -> int:
        log = self.logs[partition]
        info = log.append_as_leader(build_batch([SimpleRecord(value=value)]), leader_epoch=0)
        log.update_high_watermark(log.log_end_offset)
        return info.last_offset


class CountingReader(LocalLogMetadataReader):
    def __init__(self, topic: MetadataTopic) -> None:
        super().__init__(lambda partition: topic.logs[partition])
        self.records_read = 0
        self.first_offsets: list[tuple[int, int]] = []

    def read(self, metadata_partition: int, offset: int, max_records: int) -> MetadataRead:
        self.first_offsets.append((metadata_partition, offset))
        read = super().read(metadata_partition, offset, max_records)
        self.records_read += len(read.records)
        return read


@pytest.fixture
def topic(tmp_path: Path) -> Iterator[MetadataTopic]:
    metadata_topic = MetadataTopic(tmp_path / "metadata")
    yield metadata_topic
    metadata_topic.close()


def consumer_for(
    topic: MetadataTopic, state_dir: Path | None, **config: int
) -> tuple[ConsumerTask, CountingReader]:
    reader = CountingReader(topic)
    task = ConsumerTask(
        reader,
        PARTITIONER,
        snapshot_dir_for=None
        if state_dir is None
        else (lambda tip: state_dir / tip.topic_partition.dir_name),
        committed_offsets_dir=state_dir,
        config=ConsumerTaskConfig(**config),
    )
    return task, reader


def drain(task: ConsumerTask) -> None:
    for _ in range(100):
        if not task.poll_once():
            return
    raise AssertionError("the consumer kept finding records")


def test_events_of_several_partitions_reach_their_own_caches(topic: MetadataTopic) -> None:
    a, b, untracked = partitions_on(1, 3)
    (c,) = partitions_on(2, 1)
    segments = {tip: copy_started(tip, 0, 99) for tip in (a, b, untracked, c)}
    for segment in segments.values():
        topic.publish(segment)
    topic.publish(state_update(segments[a], S.COPY_SEGMENT_FINISHED))
    topic.publish(state_update(segments[c], S.COPY_SEGMENT_FINISHED))
    topic.publish(partition_delete(b, RemotePartitionDeleteState.DELETE_PARTITION_MARKED))
    task, _ = consumer_for(topic, None)
    task.track([a, b, c])
    assert not task.is_ready(a)
    drain(task)

    assert all(task.is_ready(tip) for tip in (a, b, c))
    assert task.cache(untracked) is None
    cache_a, cache_b, cache_c = (task.cache(tip) for tip in (a, b, c))
    assert cache_a is not None and cache_b is not None and cache_c is not None
    assert cache_a.remote_log_segment_metadata(0, 50) == segments[a].create_with_updates(
        state_update(segments[a], S.COPY_SEGMENT_FINISHED)
    )
    assert [s.state for s in cache_b.list_all_remote_log_segments()] == [S.COPY_SEGMENT_STARTED]
    partition_b = cache_b.remote_partition_delete_metadata()
    assert partition_b is not None
    assert partition_b.state is RemotePartitionDeleteState.DELETE_PARTITION_MARKED
    assert cache_c.highest_offset_for_epoch(0) == 99
    # Every record of the metadata partitions was passed, untracked ones included.
    assert task.positions() == {1: topic.logs[1].log_end_offset, 2: topic.logs[2].log_end_offset}


def test_illegal_transition_is_logged_once_and_skipped(
    topic: MetadataTopic, caplog: pytest.LogCaptureFixture
) -> None:
    (a,) = partitions_on(0, 1)
    segment = copy_started(a, 0, 9)
    topic.publish(segment)
    topic.publish(state_update(segment, S.DELETE_SEGMENT_STARTED))
    _, illegal_offset = topic.publish(state_update(segment, S.COPY_SEGMENT_FINISHED))
    topic.append(0, b"\x07not a metadata record")
    later = copy_started(a, 10, 19)
    topic.publish(later)
    task, _ = consumer_for(topic, None)
    task.track([a])
    with caplog.at_level(logging.WARNING, logger="storage_core.tiered.topic_based_rlmm"):
        drain(task)

    refused = [r for r in caplog.records if "refused" in r.getMessage()]
    assert len(refused) == 1
    assert str(a) in refused[0].getMessage()
    assert f"offset={illegal_offset}" in refused[0].getMessage()
    undecodable = [r for r in caplog.records if "undecodable" in r.getMessage()]
    assert len(undecodable) == 1
    cache = task.cache(a)
    assert cache is not None
    assert [(s.start_offset, s.state) for s in cache.list_all_remote_log_segments()] == [
        (0, S.DELETE_SEGMENT_STARTED),
        (10, S.COPY_SEGMENT_STARTED),
    ]
    error = task.wait_until_applied(a, illegal_offset, timeout_ms=10)
    assert isinstance(error, IllegalRemoteLogStateTransitionError)


def test_restart_resumes_from_snapshots_and_committed_offsets(
    topic: MetadataTopic, tmp_path: Path
) -> None:
    state_dir = tmp_path / "state"
    a, b, untracked = partitions_on(1, 3)
    for index in range(20):
        for tip in (a, b, untracked):
            segment = copy_started(tip, index * 100, index * 100 + 99)
            topic.publish(segment)
            topic.publish(state_update(segment, S.COPY_SEGMENT_FINISHED))
    task, reader = consumer_for(topic, state_dir)
    task.track([a, b])
    drain(task)
    before = {tip: task.cache(tip).list_all_remote_log_segments() for tip in (a, b)}  # type: ignore[union-attr]
    assert reader.records_read == 120
    task.close()
    assert (state_dir / a.topic_partition.dir_name / REMOTE_LOG_SNAPSHOT_FILE_NAME).is_file()
    assert CommittedOffsetsFile(state_dir).read() == {1: 119}
    assert (state_dir / COMMITTED_OFFSETS_FILE_NAME).read_text() == "0\n1\n1 119\n"

    last = copy_started(a, 2000, 2099)
    _, last_offset = topic.publish(last)
    restarted, reader = consumer_for(topic, state_dir)
    restarted.track([a, b])
    drain(restarted)

    assert reader.first_offsets[0] == (1, 120)  # not from 0
    assert reader.records_read == 1
    assert restarted.is_ready(a) and restarted.is_ready(b)
    cache_b = restarted.cache(b)
    assert cache_b is not None and cache_b.list_all_remote_log_segments() == before[b]
    cache_a = restarted.cache(a)
    assert cache_a is not None
    assert cache_a.list_all_remote_log_segments() == [*before[a], last]
    assert restarted.applied_offset(a) == last_offset


def test_a_partition_without_snapshot_rewinds_its_metadata_partition_only_for_itself(
    topic: MetadataTopic, tmp_path: Path
) -> None:
    state_dir = tmp_path / "state"
    a, b = partitions_on(2, 2)
    segment_a = copy_started(a, 0, 9)
    segment_b = copy_started(b, 0, 9)
    topic.publish(segment_a)
    topic.publish(segment_b)
    task, reader = consumer_for(topic, state_dir)
    task.track([a])
    drain(task)
    topic.publish(state_update(segment_a, S.COPY_SEGMENT_FINISHED))
    task.track([b])  # tracked later: its events before the position must be read again
    drain(task)

    assert reader.first_offsets[-2:] == [(2, 0), (2, 3)]
    cache_a, cache_b = task.cache(a), task.cache(b)
    assert cache_a is not None and cache_b is not None
    assert [s.state for s in cache_a.list_all_remote_log_segments()] == [S.COPY_SEGMENT_FINISHED]
    assert cache_b.list_all_remote_log_segments() == [segment_b]
    task.close()


def test_read_your_writes_waits_for_the_consumer_thread(topic: MetadataTopic) -> None:
    (a,) = partitions_on(0, 1)
    task, _ = consumer_for(topic, None, idle_poll_ms=10)
    task.track([a])
    task.start()
    try:
        _, offset = topic.publish(copy_started(a, 0, 9))
        task.wakeup()
        assert task.wait_until_applied(a, offset, timeout_ms=5_000) is None
        cache = task.cache(a)
        assert cache is not None and len(cache.list_all_remote_log_segments()) == 1
        with pytest.raises(RemoteLogMetadataConsumeTimeoutError, match=r"consume\.wait\.ms"):
            task.wait_until_applied(a, offset + 5, timeout_ms=50)
    finally:
        task.close()


class LogPublisher:
    """Publishes straight to the metadata Logs, as the broker's leader append would."""

    def __init__(self, topic: MetadataTopic) -> None:
        self.topic = topic
        self.lock = threading.Lock()

    def publish(self, metadata_partition: int, value: bytes) -> int:
        with self.lock:
            return self.topic.append(metadata_partition, value)


def test_manager_publishes_and_reads_its_own_writes(topic: MetadataTopic) -> None:
    (a,) = partitions_on(1, 1)
    manager = TopicBasedRemoteLogMetadataManager(
        publisher=LogPublisher(topic),
        reader=LocalLogMetadataReader(lambda partition: topic.logs[partition]),
        num_metadata_topic_partitions=NUM_METADATA_PARTITIONS,
        consume_wait_ms=5_000,
        consumer_config=ConsumerTaskConfig(idle_poll_ms=1_000),
    )
    manager.start()
    try:
        segment = copy_started(a, 0, 99)
        manager.add_remote_log_segment_metadata(segment)
        manager.update_remote_log_segment_metadata(state_update(segment, S.COPY_SEGMENT_FINISHED))
        assert manager.is_ready(a)
        found = manager.remote_log_segment_metadata(a, 0, 42)
        assert found is not None and found.state is S.COPY_SEGMENT_FINISHED
        assert manager.highest_offset_for_epoch(a, 0) == 99
        with pytest.raises(IllegalRemoteLogStateTransitionError):
            manager.update_remote_log_segment_metadata(
                state_update(segment, S.DELETE_SEGMENT_FINISHED)
            )
        with pytest.raises(IllegalRemoteLogStateTransitionError):
            manager.add_remote_log_segment_metadata(
                found  # not COPY_SEGMENT_STARTED: refused before publishing
            )
        assert topic.logs[1].log_end_offset == 3
    finally:
        manager.close()


def test_catching_up_reads_what_was_published_after_the_partition_became_ready(
    topic: MetadataTopic,
) -> None:
    """``is_ready`` covers what the metadata partition held when the partition was tracked;
    a restore enabled later needs everything published since, including records a hosted
    follower holds while its high watermark still lags the leader's."""
    (a,) = partitions_on(2, 1)
    task, _ = consumer_for(topic, None, idle_poll_ms=2_000)
    task.track([a])
    task.start()
    try:
        task.wait_until_ready(a, timeout_ms=5_000)
        _, first = topic.publish(copy_started(a, 0, 9))  # committed, the consumer asleep
        log = topic.logs[2]
        second = log.append_as_leader(
            build_batch(
                [SimpleRecord(value=RemoteLogMetadataSerde.serialize(copy_started(a, 10, 19)))]
            ),
            leader_epoch=0,
        ).last_offset  # held, not committed yet: the follower's HW lags
        task.wait_until_caught_up(a, at_least=first + 1, timeout_ms=5_000)
        cache = task.cache(a)
        assert cache is not None
        assert [m.start_offset for m in cache.list_all_remote_log_segments()] == [0]
        with pytest.raises(RemoteLogMetadataConsumeTimeoutError, match="catching up"):
            task.wait_until_caught_up(a, at_least=second + 1, timeout_ms=300)
        threading.Timer(0.2, lambda: log.update_high_watermark(log.log_end_offset)).start()
        task.wait_until_caught_up(a, at_least=second + 1, timeout_ms=5_000)
        assert [m.start_offset for m in cache.list_all_remote_log_segments()] == [0, 10]
    finally:
        task.close()
