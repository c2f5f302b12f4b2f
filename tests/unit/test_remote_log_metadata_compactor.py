"""RemoteLogMetadataCompactor over real metadata-partition Logs, and ConsumerTasks reading
them before, during and after the cuts."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from storage_core.common import TopicIdPartition
from storage_core.errors import LogEndOffsetMovedError
from storage_core.records import SimpleRecord, build_batch
from storage_core.tiered.metadata import RemoteLogSegmentMetadata, RemoteLogSegmentState
from storage_core.tiered.topic_based_rlmm import ConsumerTask
from storage_core.tiered.topic_based_rlmm.metadata_compactor import (
    CompactorConfig,
    MetadataPartitionHost,
    RemoteLogMetadataCompactor,
)
from tests.remote_log_metadata_events import copy_started, state_update
from tests.unit.test_topic_based_rlmm_consumer import (
    CountingReader,
    MetadataTopic,
    consumer_for,
    drain,
    partitions_on,
)

S = RemoteLogSegmentState


@pytest.fixture
def topic(tmp_path: Path) -> Iterator[MetadataTopic]:
    metadata_topic = MetadataTopic(tmp_path / "metadata")
    yield metadata_topic
    metadata_topic.close()


def compactor_over(
    topic: MetadataTopic,
    *,
    min_restate_gain_records: int = 8,
    max_batch_bytes: int = 1024 * 1024,
    batches: list[int] | None = None,
    before_append: Callable[[], None] = lambda: None,
    reader: CountingReader | None = None,
) -> RemoteLogMetadataCompactor:
    """``before_append``: called before each re-append's compare (other writers' turn)."""

    def publish_batch(partition: int, values: list[bytes], *, expected_log_end_offset: int) -> int:
        before_append()
        log = topic.logs[partition]
        if log.log_end_offset != expected_log_end_offset:
            raise LogEndOffsetMovedError(f"{log.log_end_offset} != {expected_log_end_offset}")
        if batches is not None:
            batches.append(sum(len(v) for v in values))
        info = log.append_as_leader(
            build_batch([SimpleRecord(value=v) for v in values]), leader_epoch=0
        )
        log.update_high_watermark(log.log_end_offset)
        return info.last_offset

    def move_log_start(partition: int, offset: int) -> None:
        topic.logs[partition].maybe_increment_log_start_offset(offset, "DeleteRecords")

    host = MetadataPartitionHost(
        led_partitions=lambda: list(topic.logs),
        log_start_offset=lambda p: topic.logs[p].log_start_offset,
        high_watermark=lambda p: topic.logs[p].high_watermark,
        reader=(reader := reader or consumer_for(topic, None)[1]),
        read_appended=reader.read_appended,
        publish_batch=publish_batch,
        move_log_start=move_log_start,
        consumer_position=lambda p: None,
        max_batch_bytes=lambda p: max_batch_bytes,
    )
    return RemoteLogMetadataCompactor(
        host,
        config=CompactorConfig(
            interval_ms=1_000,
            min_lag_ms=0,
            min_restate_gain_records=min_restate_gain_records,
            restate=True,
        ),
    )


def state_of(task: ConsumerTask, tips: list[TopicIdPartition]) -> dict[TopicIdPartition, object]:
    out: dict[TopicIdPartition, object] = {}
    for tip in tips:
        cache = task.cache(tip)
        assert cache is not None and task.is_ready(tip)
        out[tip] = (
            cache.list_all_remote_log_segments(),
            cache.remote_partition_delete_metadata(),
            {e: cache.highest_offset_for_epoch(e) for e in cache.leader_epochs()},
        )
    return out


def test_a_broker_whose_snapshot_is_older_than_the_log_start_rebuilds(
    topic: MetadataTopic, tmp_path: Path
) -> None:
    (tip,) = partitions_on(0, 1)
    old = copy_started(tip, 0, 9)
    topic.publish(old)
    topic.publish(state_update(old, S.COPY_SEGMENT_FINISHED))
    task, _ = consumer_for(topic, tmp_path / "broker")
    task.track([tip])
    drain(task)
    task.close()  # snapshot at offset 1: the old segment readable
    # while the broker is down: the old segment expires, a new one is copied, and the
    # records of the old one go
    topic.publish(state_update(old, S.DELETE_SEGMENT_STARTED))
    topic.publish(state_update(old, S.DELETE_SEGMENT_FINISHED))
    new = copy_started(tip, 10, 19)
    topic.publish(new)
    topic.publish(state_update(new, S.COPY_SEGMENT_FINISHED))
    [outcome] = [o for o in compactor_over(topic).compact_once() if o.metadata_partition == 0]
    assert (outcome.log_start_offset_before, outcome.log_start_offset_after) == (0, 4)
    assert topic.logs[0].log_start_offset == 4

    restarted, _ = consumer_for(topic, tmp_path / "broker")
    restarted.track([tip])
    drain(restarted)
    assert restarted.is_ready(tip)
    cache = restarted.cache(tip)
    assert cache is not None
    # the deleted segment is not alive again, the new one is there
    assert [m.remote_log_segment_id for m in cache.list_all_remote_log_segments()] == [
        new.remote_log_segment_id
    ]
    assert cache.remote_log_segment_metadata(0, 5) is None
    restarted.close()


def test_history_comes_and_goes_and_the_metadata_partition_stays_bounded(
    topic: MetadataTopic, tmp_path: Path
) -> None:
    rng = random.Random(7)
    keeper, *churning = partitions_on(0, 4)
    tips = [keeper, *churning]
    next_start = dict.fromkeys(tips, 0)
    live: dict[TopicIdPartition, list[RemoteLogSegmentMetadata]] = {tip: [] for tip in tips}

    def copy(tip: TopicIdPartition) -> None:
        segment = copy_started(tip, next_start[tip], next_start[tip] + 9)
        next_start[tip] += 10
        topic.publish(segment)
        topic.publish(state_update(segment, S.COPY_SEGMENT_FINISHED))
        live[tip].append(segment)

    for _ in range(3):
        copy(keeper)  # kept forever
    running, _ = consumer_for(topic, tmp_path / "running")  # a broker up all along
    running.track(tips)
    compactor = compactor_over(topic)
    records_per_live_segment = []
    for _cycle in range(30):
        for tip in churning:
            for _ in range(rng.randint(1, 4)):
                copy(tip)
            while len(live[tip]) > 3:  # retention: the oldest go
                segment = live[tip].pop(0)
                topic.publish(state_update(segment, S.DELETE_SEGMENT_STARTED))
                topic.publish(state_update(segment, S.DELETE_SEGMENT_FINISHED))
        drain(running)
        running.checkpoint()
        compactor.compact_once()
        log = topic.logs[0]
        records = log.log_end_offset - log.log_start_offset
        records_per_live_segment.append(records / sum(len(v) for v in live.values()))
    drain(running)
    # flat: a few records per live segment (2 each, the history not yet worth cutting and
    # the last cycle's); without the compactor about 100 by the end, growing every cycle
    second, last = records_per_live_segment[10:20], records_per_live_segment[20:]
    assert max(last) <= 1.25 * max(second)
    assert max(records_per_live_segment) <= 12
    assert topic.logs[0].log_start_offset > 0
    # a broker without snapshot and one that ran all along agree, and with the whole history
    fresh, _ = consumer_for(topic, None)
    fresh.track(tips)
    drain(fresh)
    assert state_of(fresh, tips) == state_of(running, tips)
    for tip in tips:
        cache = fresh.cache(tip)
        assert cache is not None
        assert [m.remote_log_segment_id for m in cache.list_all_remote_log_segments()] == [
            m.remote_log_segment_id for m in live[tip]
        ]
    fresh.close()
    running.close()


def test_re_appended_events_fit_the_partitions_batch_limit(topic: MetadataTopic) -> None:
    keeper, churning = partitions_on(0, 2)
    kept = []
    for i in range(40):  # kept forever, interleaved with history that goes
        segment = copy_started(keeper, 10 * i, 10 * i + 9)
        topic.publish(segment)
        topic.publish(state_update(segment, S.COPY_SEGMENT_FINISHED))
        kept.append(segment)
        old = copy_started(churning, 10 * i, 10 * i + 9)
        topic.publish(old)
        topic.publish(state_update(old, S.COPY_SEGMENT_FINISHED))
        topic.publish(state_update(old, S.DELETE_SEGMENT_STARTED))
        topic.publish(state_update(old, S.DELETE_SEGMENT_FINISHED))
    batches: list[int] = []
    # a metadata partition whose segment.bytes is 4 KiB refuses larger batches
    compactor_over(topic, max_batch_bytes=4096, batches=batches).compact_once()
    assert len(batches) > 1
    assert max(batches) <= 2048
    assert topic.logs[0].log_start_offset == 240  # everything before the re-appended events
    fresh, _ = consumer_for(topic, None)
    fresh.track([keeper, churning])
    drain(fresh)
    cache = fresh.cache(keeper)
    assert cache is not None
    assert [m.remote_log_segment_id for m in cache.list_all_remote_log_segments()] == [
        m.remote_log_segment_id for m in kept
    ]
    fresh.close()


def test_a_segment_deleted_between_the_plan_and_its_re_append_stays_deleted(
    topic: MetadataTopic,
) -> None:
    keeper, churning = partitions_on(0, 2)
    kept = []
    for i in range(10):  # kept, interleaved with history that goes
        segment = copy_started(keeper, 10 * i, 10 * i + 9)
        topic.publish(segment)
        topic.publish(state_update(segment, S.COPY_SEGMENT_FINISHED))
        kept.append(segment)
        old = copy_started(churning, 10 * i, 10 * i + 9)
        topic.publish(old)
        topic.publish(state_update(old, S.COPY_SEGMENT_FINISHED))
        topic.publish(state_update(old, S.DELETE_SEGMENT_STARTED))
        topic.publish(state_update(old, S.DELETE_SEGMENT_FINISHED))
    expired = kept.pop(0)
    appends = 0

    def retention_runs_meanwhile() -> None:
        nonlocal appends
        appends += 1
        if appends == 1:  # after the plan, before its first compare-and-append
            topic.publish(state_update(expired, S.DELETE_SEGMENT_STARTED))
            topic.publish(state_update(expired, S.DELETE_SEGMENT_FINISHED))

    [outcome] = [
        o
        for o in compactor_over(topic, before_append=retention_runs_meanwhile).compact_once()
        if o.metadata_partition == 0
    ]
    assert appends == 2  # the first compare found the log moved; the second looked again
    assert outcome.restated_segments == 9
    assert outcome.log_start_offset_after == 62  # past the history and the deletion
    fresh, _ = consumer_for(topic, None)
    fresh.track([keeper, churning])
    drain(fresh)
    cache = fresh.cache(keeper)
    assert cache is not None
    assert [m.remote_log_segment_id for m in cache.list_all_remote_log_segments()] == [
        m.remote_log_segment_id for m in kept
    ]
    fresh.close()


def test_a_partition_with_nothing_to_do_is_not_read_again_until_it_changes(
    topic: MetadataTopic,
) -> None:
    (tip,) = partitions_on(0, 1)
    segment = copy_started(tip, 0, 9)
    topic.publish(segment)
    topic.publish(state_update(segment, S.COPY_SEGMENT_FINISHED))
    reader = CountingReader(topic)
    compactor = compactor_over(topic, reader=reader)
    assert [o.records for o in compactor.compact_once() if o.metadata_partition == 0] == [2]
    read = reader.records_read
    assert not [o for o in compactor.compact_once() if o.metadata_partition == 0]
    assert reader.records_read == read  # idle: not read again
    topic.publish(state_update(segment, S.DELETE_SEGMENT_STARTED))
    topic.publish(state_update(segment, S.DELETE_SEGMENT_FINISHED))
    [outcome] = [o for o in compactor.compact_once() if o.metadata_partition == 0]
    assert (outcome.records, outcome.log_start_offset_after) == (4, 4)
