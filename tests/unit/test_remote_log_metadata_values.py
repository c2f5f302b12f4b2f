"""KIP-405 metadata values, state machines and the metadata topic partitioner."""

from __future__ import annotations

import itertools

import pytest

from storage_core.common import TopicIdPartition, TopicPartition, Uuid
from storage_core.tiered.metadata import (
    RemoteLogMetadataTopicPartitioner,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataSnapshot,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteState,
)
from storage_core.tiered.metadata.partitioner import murmur2, to_positive

TIP = TopicIdPartition(Uuid.from_string("k8YHc0mdT2a4dG1nbbcX2w"), TopicPartition("orders", 0))
SEGMENT_ID = RemoteLogSegmentId(topic_id_partition=TIP, id=Uuid(5, 6))

S = RemoteLogSegmentState
P = RemotePartitionDeleteState


def test_state_ids_are_kafkas() -> None:
    assert [(s.name, s.value) for s in S] == [
        ("COPY_SEGMENT_STARTED", 0),
        ("COPY_SEGMENT_FINISHED", 1),
        ("DELETE_SEGMENT_STARTED", 2),
        ("DELETE_SEGMENT_FINISHED", 3),
    ]
    assert [(s.name, s.value) for s in P] == [
        ("DELETE_PARTITION_MARKED", 0),
        ("DELETE_PARTITION_STARTED", 1),
        ("DELETE_PARTITION_FINISHED", 2),
    ]
    assert S.for_id(4) is None and P.for_id(3) is None and S.for_id(2) is S.DELETE_SEGMENT_STARTED


def test_segment_transitions_are_kafkas_table() -> None:
    # RemoteLogSegmentState.isValidTransition, pair by pair.
    valid = {
        (None, S.COPY_SEGMENT_STARTED),
        (S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED),
        (S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED),
        (S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED),
        (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED),
    } | {(s, s) for s in S}
    for source, target in itertools.product([None, *S], S):
        assert S.is_valid_transition(source, target) == ((source, target) in valid), (
            source,
            target,
        )


def test_partition_delete_transitions_are_kafkas_table() -> None:
    valid = {
        (None, P.DELETE_PARTITION_MARKED),
        (P.DELETE_PARTITION_MARKED, P.DELETE_PARTITION_STARTED),
        (P.DELETE_PARTITION_STARTED, P.DELETE_PARTITION_FINISHED),
    } | {(s, s) for s in P}
    for source, target in itertools.product([None, *P], P):
        assert P.is_valid_transition(source, target) == ((source, target) in valid), (
            source,
            target,
        )


def metadata(**overrides: object) -> RemoteLogSegmentMetadata:
    fields: dict[str, object] = {
        "remote_log_segment_id": SEGMENT_ID,
        "start_offset": 0,
        "end_offset": 100,
        "max_timestamp_ms": 10,
        "broker_id": 1,
        "event_timestamp_ms": 20,
        "segment_size_in_bytes": 1000,
        "segment_leader_epochs": {0: 0, 1: 20, 2: 80},
    }
    fields.update(overrides)
    return RemoteLogSegmentMetadata(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"start_offset": -1}, "start_offset"),
        ({"start_offset": 10, "end_offset": 9, "segment_leader_epochs": {0: 10}}, "below"),
        ({"segment_leader_epochs": {}}, "empty"),
        ({"segment_leader_epochs": {1: 0, 0: 20}}, "strictly increasing"),
        ({"segment_leader_epochs": {0: 0, 1: 101}}, "outside the segment"),
        ({"segment_leader_epochs": {0: 50, 1: 20}}, "below 50"),
        ({"start_offset": 5, "segment_leader_epochs": {0: 0}}, "outside the segment"),
        ({"segment_leader_epochs": {-1: 0}}, "leader epoch"),
        ({"segment_size_in_bytes": -1}, "segment_size_in_bytes"),
        ({"broker_id": 1 << 31}, "broker_id"),
        ({"custom_metadata": "text"}, "custom_metadata"),
        ({"state": 1}, "RemoteLogSegmentState"),
    ],
)
def test_segment_metadata_validates_when_built(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        metadata(**overrides)


def test_segment_metadata_is_immutable_and_hashable() -> None:
    epochs = {0: 0, 1: 20}
    built = metadata(segment_leader_epochs=epochs)
    epochs[2] = 90
    assert dict(built.segment_leader_epochs) == {0: 0, 1: 20}
    with pytest.raises(TypeError):
        built.segment_leader_epochs[5] = 1  # type: ignore[index]
    assert built == metadata(segment_leader_epochs={0: 0, 1: 20})
    assert len({built, metadata(segment_leader_epochs={0: 0, 1: 20})}) == 1
    assert built.epoch_end_offset(0) == 19 and built.epoch_end_offset(1) == 100


def test_create_with_updates() -> None:
    base = metadata(custom_metadata=b"a", txn_idx_empty=True)
    update = RemoteLogSegmentMetadataUpdate(
        remote_log_segment_id=SEGMENT_ID,
        event_timestamp_ms=99,
        state=S.COPY_SEGMENT_FINISHED,
        broker_id=3,
        custom_metadata=b"b",
    )
    updated = base.create_with_updates(update)
    assert updated == metadata(
        broker_id=3,
        event_timestamp_ms=99,
        custom_metadata=b"b",
        state=S.COPY_SEGMENT_FINISHED,
        txn_idx_empty=True,
    )
    assert base.state is S.COPY_SEGMENT_STARTED
    other = RemoteLogSegmentId(topic_id_partition=TIP, id=Uuid(7, 7))
    with pytest.raises(ValueError, match="can not be applied"):
        base.create_with_updates(
            RemoteLogSegmentMetadataUpdate(
                remote_log_segment_id=other,
                event_timestamp_ms=1,
                state=S.COPY_SEGMENT_FINISHED,
                broker_id=0,
            )
        )


def test_snapshot_value_round_trip() -> None:
    full = metadata(state=S.DELETE_SEGMENT_STARTED, custom_metadata=b"c")
    snapshot = RemoteLogSegmentMetadataSnapshot.create(full)
    assert snapshot.segment_id == SEGMENT_ID.id
    assert snapshot.to_metadata(TIP) == full
    with pytest.raises(ValueError, match="outside"):
        RemoteLogSegmentMetadataSnapshot(
            segment_id=Uuid(1, 1),
            start_offset=0,
            end_offset=5,
            max_timestamp_ms=0,
            broker_id=0,
            event_timestamp_ms=0,
            segment_size_in_bytes=0,
            segment_leader_epochs={0: 6},
        )


# ---- RemoteLogMetadataTopicPartitioner ------------------------------------------------


def test_murmur2_matches_kafkas_utils_test() -> None:
    # org.apache.kafka.common.utils.UtilsTest#testMurmur2
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482
    assert murmur2(b"a-little-bit-long-string") == -985981536
    assert murmur2(b"a-little-bit-longer-string") == -1486304829
    assert murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == -58897971
    assert murmur2(b"abc") == 479470107
    assert to_positive(-1) == 0x7FFFFFFF and to_positive(-(1 << 31)) == 0


def test_metadata_partition_vector() -> None:
    # Transcribed vector; it follows from Kafka's formula (RemoteLogMetadataTopicPartitioner
    # and the UtilsTest murmur2 values above), not re-found in Kafka's own tests.
    partitioner = RemoteLogMetadataTopicPartitioner(50)
    topic_id = Uuid.from_string("AAAAAAAAAAAAAAAAAAAAAQ")  # Uuid(0, 1)
    partitions = [
        partitioner.metadata_partition(TopicIdPartition(topic_id, TopicPartition("foo", p)))
        for p in range(3)
    ]
    assert partitions == [35, 6, 18]


def test_metadata_partition_ignores_the_topic_name_and_stays_in_range() -> None:
    partitioner = RemoteLogMetadataTopicPartitioner(7)
    topic_id = Uuid(-(1 << 63), (1 << 63) - 1)
    a = partitioner.metadata_partition(TopicIdPartition(topic_id, TopicPartition("a", 9)))
    b = partitioner.metadata_partition(TopicIdPartition(topic_id, TopicPartition("b", 9)))
    assert a == b and 0 <= a < 7
    with pytest.raises(ValueError, match="positive"):
        RemoteLogMetadataTopicPartitioner(0)
