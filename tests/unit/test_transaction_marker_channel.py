"""The transaction marker channel without a network: where each partition's marker goes, the
WriteTxnMarkers request and the reading of its answer, and what the channel does with each
partition's answer (Kafka's TransactionMarkerChannelManagerTest and
TransactionMarkerRequestCompletionHandlerTest cases). The manager is not started: its queues
are read as its sender threads would take them, and answers handed to it as they would."""

from __future__ import annotations

import io
from dataclasses import replace

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.write_txn_markers.v1 import response as response_v1
from kio.serial import entity_reader, entity_writer

from storage_core.common import TopicPartition
from storage_core.coordinator.transaction.transaction_marker_channel import (
    MarkerDone,
    TransactionMarkerChannelManager,
)
from storage_core.coordinator.transaction.transaction_marker_entries import (
    MarkerOutcome,
    MarkerResponseMismatchError,
    TxnMarkerEntry,
    marker_destinations,
    marker_outcome,
    partition_errors,
    write_txn_markers_request,
)
from storage_core.coordinator.transaction.transaction_metadata import TxnTransitMetadata
from storage_core.coordinator.transaction.transaction_results import TransactionResult, TxnMarkers
from storage_core.coordinator.transaction.transaction_state import TransactionState
from storage_core.replication.metadata_cache import (
    MetadataCache,
    MetadataImage,
    PartitionMetadata,
    TopicMetadata,
)
from storage_core.zk.zk_data import NO_LEADER, BrokerRegistration, EndPoint

E = ErrorCode
LISTENER = "INTERNAL"


def broker(broker_id: int, listener: str = LISTENER) -> BrokerRegistration:
    return BrokerRegistration(
        broker_id=broker_id,
        endpoints=(EndPoint(listener=listener, host="127.0.0.1", port=9000 + broker_id),),
    )


def topic(name: str, *leaders: int) -> TopicMetadata:
    return TopicMetadata(
        name=name,
        topic_id=None,
        partitions=tuple(
            PartitionMetadata(
                partition=i, replicas=(1, 2, 3), leader=leader, leader_epoch=0, isr=()
            )
            for i, leader in enumerate(leaders)
        ),
    )


def image(*topics: TopicMetadata) -> MetadataImage:
    brokers = {1: broker(1), 2: broker(2), 3: broker(3, listener="EXTERNAL")}
    return MetadataImage(brokers=brokers, topics={t.name: t for t in topics})


def tp(name: str, partition: int) -> TopicPartition:
    return TopicPartition(name, partition)


# ====================================================================== the pure part
@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (E.none, MarkerOutcome.WRITTEN),
        (E.unsupported_for_message_format, MarkerOutcome.WRITTEN),
        (E.unsupported_version, MarkerOutcome.WRITTEN),
        (E.not_leader_or_follower, MarkerOutcome.RETRY),
        (E.unknown_topic_or_partition, MarkerOutcome.RETRY),
        (E.not_enough_replicas, MarkerOutcome.RETRY),
        (E.not_enough_replicas_after_append, MarkerOutcome.RETRY),
        (E.request_timed_out, MarkerOutcome.RETRY),
        (E.kafka_storage_error, MarkerOutcome.RETRY),
        (E.invalid_producer_epoch, MarkerOutcome.FENCED),
        (E.transaction_coordinator_fenced, MarkerOutcome.FENCED),
        (E.cluster_authorization_failed, MarkerOutcome.UNAUTHORIZED),
        (E.corrupt_message, MarkerOutcome.FATAL),
        (E.message_too_large, MarkerOutcome.FATAL),
        (E.record_list_too_large, MarkerOutcome.FATAL),
        (E.invalid_required_acks, MarkerOutcome.FATAL),
        (E.unknown_server_error, MarkerOutcome.FATAL),
    ],
)
def test_each_answer_of_a_partition_has_kafkas_meaning(
    error: ErrorCode, outcome: MarkerOutcome
) -> None:
    assert marker_outcome(error) is outcome


def test_partitions_are_grouped_by_their_reachable_leader() -> None:
    view = image(topic("a", 1, 2, 1, NO_LEADER, 3, 4))
    destinations = marker_destinations(
        view, [tp("a", i) for i in range(6)] + [tp("a", 9), tp("gone", 0)], LISTENER
    )
    assert destinations.by_broker == {
        1: frozenset({tp("a", 0), tp("a", 2)}),
        2: frozenset({tp("a", 1)}),
    }
    # no leader; a leader without an endpoint of the inter-broker listener; a dead leader
    assert destinations.unknown_leader == frozenset({tp("a", 3), tp("a", 4), tp("a", 5)})
    assert destinations.deleted == frozenset({tp("a", 9), tp("gone", 0)})


def entry(txn: str, producer_id: int, *partitions: TopicPartition) -> TxnMarkerEntry:
    return TxnMarkerEntry(
        transactional_id=txn,
        producer_id=producer_id,
        producer_epoch=2,
        coordinator_epoch=7,
        result=TransactionResult.COMMIT,
        topic_partitions=frozenset(partitions),
    )


def test_an_entry_without_producer_or_partitions_is_refused() -> None:
    with pytest.raises(ValueError, match="producer id and epoch"):
        entry("t", -1, tp("a", 0))
    with pytest.raises(ValueError, match="no partition"):
        entry("t", 5)


def test_the_request_carries_each_marker_by_topic_and_answers_are_matched_by_position() -> None:
    first = entry("t1", 5, tp("b", 1), tp("a", 0), tp("b", 0))
    second = replace(entry("t2", 5, tp("a", 1)), result=TransactionResult.ABORT)
    request = write_txn_markers_request([first, second])
    buffer = io.BytesIO()
    entity_writer(type(request))(buffer, request)
    decoded, _ = entity_reader(type(request))(buffer.getvalue(), 0)
    assert [
        (
            m.producer_id,
            m.producer_epoch,
            m.transaction_result,
            m.coordinator_epoch,
            [(t.name, list(t.partition_indexes)) for t in m.topics],
        )
        for m in decoded.markers
    ] == [
        (5, 2, True, 7, [("a", [0]), ("b", [0, 1])]),
        (5, 2, False, 7, [("a", [1])]),
    ]

    def result(errors: dict[TopicPartition, ErrorCode]) -> response_v1.WritableTxnMarkerResult:
        return response_v1.WritableTxnMarkerResult(
            producer_id=5,  # type: ignore[arg-type]
            topics=tuple(
                response_v1.WritableTxnMarkerTopicResult(
                    name=t.topic,  # type: ignore[arg-type]
                    partitions=(
                        response_v1.WritableTxnMarkerPartitionResult(
                            partition_index=t.partition,  # type: ignore[arg-type]
                            error_code=error,
                        ),
                    ),
                )
                for t, error in errors.items()
            ),
        )

    response = response_v1.WriteTxnMarkersResponse(
        markers=(
            result({tp("a", 0): E.none, tp("b", 0): E.not_leader_or_follower}),
            result({tp("a", 1): E.transaction_coordinator_fenced}),
        )
    )
    assert partition_errors([first, second], response) == [
        # b-1 left out of the answer: retried
        {tp("a", 0): E.none, tp("b", 0): E.not_leader_or_follower, tp("b", 1): E.request_timed_out},
        {tp("a", 1): E.transaction_coordinator_fenced},
    ]
    with pytest.raises(MarkerResponseMismatchError, match="answered 1 markers to 2 sent"):
        partition_errors([first, second], replace(response, markers=response.markers[:1]))
    with pytest.raises(MarkerResponseMismatchError, match="producer id 5 in the place of 6"):
        partition_errors(
            [entry("t3", 6, tp("a", 1))], replace(response, markers=response.markers[1:])
        )


# ====================================================================== the manager
class Recorder:
    def __init__(self) -> None:
        self.completed: list[str] = []
        self.failed: list[tuple[str, ErrorCode]] = []


def manager(
    view: MetadataImage, recorder: Recorder
) -> tuple[TransactionMarkerChannelManager, MetadataCache]:
    cache = MetadataCache(1)
    cache.set_image(view)
    channel = TransactionMarkerChannelManager(
        broker_id=1,
        metadata_cache=cache,
        inter_broker_listener_name=LISTENER,
        on_complete=recorder.completed.append,
        on_failed=lambda txn, error: recorder.failed.append((txn, error)),
        retry_backoff_ms=0,
    )
    return channel, cache


def markers(txn: str, producer_id: int, *partitions: TopicPartition) -> TxnMarkers:
    return TxnMarkers(
        transactional_id=txn,
        producer_id=producer_id,
        producer_epoch=2,
        result=TransactionResult.COMMIT,
        topic_partitions=frozenset(partitions),
        complete=TxnTransitMetadata(
            producer_id=producer_id,
            last_producer_id=-1,
            producer_epoch=2,
            last_producer_epoch=-1,
            txn_timeout_ms=60_000,
            txn_state=TransactionState.COMPLETE_COMMIT,
            topic_partitions=frozenset(),
            txn_start_timestamp_ms=-1,
            txn_last_update_timestamp_ms=0,
        ),
    )


def answer(
    channel: TransactionMarkerChannelManager,
    broker_id: int,
    errors: dict[TopicPartition, ErrorCode],
) -> None:
    """Take what is queued for ``broker_id`` and answer each partition with ``errors``."""
    batch = channel.take_batch(broker_id)
    assert batch is not None
    channel.handle_response(
        broker_id, batch, [{p: errors[p] for p in q.entry.topic_partitions} for q in batch]
    )


def test_markers_queued_for_one_broker_go_in_one_request_and_complete_once() -> None:
    recorder = Recorder()
    channel, _ = manager(image(topic("a", 1, 2, 1)), recorder)
    channel.add_txn_markers_to_send(
        7, markers("t1", 5, tp("a", 0), tp("a", 1)), txn_topic_partition=0
    )
    channel.add_txn_markers_to_send(7, markers("t2", 6, tp("a", 2)), txn_topic_partition=0)
    assert [sorted(e.topic_partitions) for e in channel.queued_markers(1)] == [
        [tp("a", 0)],
        [tp("a", 2)],
    ]
    assert [e.coordinator_epoch for e in channel.queued_markers(1)] == [7, 7]
    batch = channel.take_batch(1)
    assert batch is not None and len(batch) == 2  # both markers in one request to broker 1
    channel.handle_response(1, batch, [{tp("a", 0): E.none}, {tp("a", 2): E.none}])
    assert recorder.completed == ["t2"]  # t1 still waits for broker 2
    answer(channel, 2, {tp("a", 1): E.none})
    assert recorder.completed == ["t2", "t1"]
    assert channel.num_txns_with_pending_markers() == 0


def test_a_retriable_answer_goes_to_the_leader_of_then() -> None:
    recorder = Recorder()
    channel, cache = manager(image(topic("a", 1, 1)), recorder)
    channel.add_txn_markers_to_send(
        7, markers("t", 5, tp("a", 0), tp("a", 1)), txn_topic_partition=0
    )
    answer(channel, 1, {tp("a", 0): E.none, tp("a", 1): E.not_leader_or_follower})
    assert [sorted(e.topic_partitions) for e in channel.waiting_markers()] == [[tp("a", 1)]]
    cache.set_image(image(topic("a", 1, 2)))  # a-1 moved to broker 2
    channel.retry_due_markers()
    assert [sorted(e.topic_partitions) for e in channel.queued_markers(2)] == [[tp("a", 1)]]
    answer(channel, 2, {tp("a", 1): E.request_timed_out})
    channel.retry_due_markers()
    answer(channel, 2, {tp("a", 1): E.none})
    assert recorder.completed == ["t"]
    assert recorder.failed == []


def test_a_lost_connection_retries_every_marker_of_the_request() -> None:
    recorder = Recorder()
    channel, _ = manager(image(topic("a", 1, 1)), recorder)
    channel.add_txn_markers_to_send(
        7, markers("t", 5, tp("a", 0), tp("a", 1)), txn_topic_partition=0
    )
    batch = channel.take_batch(1)
    assert batch is not None
    channel.handle_failure(1, batch, "connection refused")
    assert channel.queued_markers(1) == []
    channel.retry_due_markers()
    answer(channel, 1, {tp("a", 0): E.none, tp("a", 1): E.none})
    assert recorder.completed == ["t"]


def test_a_partition_without_leader_waits_and_a_deleted_topic_counts_as_written() -> None:
    recorder = Recorder()
    channel, cache = manager(image(topic("a", NO_LEADER), topic("b", 1)), recorder)
    channel.add_txn_markers_to_send(
        7, markers("t", 5, tp("a", 0), tp("b", 0), tp("gone", 0)), txn_topic_partition=0
    )
    assert [sorted(e.topic_partitions) for e in channel.waiting_markers()] == [[tp("a", 0)]]
    answer(channel, 1, {tp("b", 0): E.none})
    assert recorder.completed == []
    channel.retry_due_markers()  # still no leader: waits again
    assert [sorted(e.topic_partitions) for e in channel.waiting_markers()] == [[tp("a", 0)]]
    # the leader answers UNKNOWN_TOPIC_OR_PARTITION: retried, and the topic is gone by then
    cache.set_image(image(topic("a", 2), topic("b", 1)))
    channel.retry_due_markers()
    answer(channel, 2, {tp("a", 0): E.unknown_topic_or_partition})
    cache.set_image(image(topic("b", 1)))
    channel.retry_due_markers()
    assert recorder.completed == ["t"]


def test_every_partition_deleted_completes_at_once() -> None:
    recorder = Recorder()
    channel, _ = manager(image(), recorder)
    channel.add_txn_markers_to_send(7, markers("t", 5, tp("gone", 0)), txn_topic_partition=0)
    assert recorder.completed == ["t"]
    assert channel.num_txns_with_pending_markers() == 0


@pytest.mark.parametrize(
    "error", [E.transaction_coordinator_fenced, E.invalid_producer_epoch, E.corrupt_message]
)
def test_a_fenced_or_fatal_answer_stops_the_transaction(error: ErrorCode) -> None:
    recorder = Recorder()
    channel, _ = manager(image(topic("a", 1, 2)), recorder)
    channel.add_txn_markers_to_send(
        7, markers("t", 5, tp("a", 0), tp("a", 1)), txn_topic_partition=0
    )
    answer(channel, 1, {tp("a", 0): error})
    assert recorder.failed == [("t", error)]
    answer(channel, 2, {tp("a", 1): E.none})  # the other leader's answer changes nothing
    channel.retry_due_markers()
    assert recorder.completed == []
    assert recorder.failed == [("t", error)]
    assert channel.num_txns_with_pending_markers() == 0


def test_cluster_authorization_failed_is_reported_once_and_retried() -> None:
    recorder = Recorder()
    channel, _ = manager(image(topic("a", 1)), recorder)
    channel.add_txn_markers_to_send(7, markers("t", 5, tp("a", 0)), txn_topic_partition=0)
    answer(channel, 1, {tp("a", 0): E.cluster_authorization_failed})
    assert recorder.failed == [("t", E.cluster_authorization_failed)]
    assert [sorted(e.topic_partitions) for e in channel.waiting_markers()] == [[tp("a", 0)]]
    channel.maybe_retry_now()  # an operator granted ClusterAction
    channel.retry_due_markers()
    answer(channel, 1, {tp("a", 0): E.cluster_authorization_failed})
    channel.maybe_retry_now()
    channel.retry_due_markers()
    answer(channel, 1, {tp("a", 0): E.none})
    assert recorder.failed == [("t", E.cluster_authorization_failed)]
    assert recorder.completed == ["t"]


def test_markers_of_a_lost_transaction_partition_are_dropped() -> None:
    recorder = Recorder()
    channel, _ = manager(image(topic("a", 1, NO_LEADER)), recorder)
    channel.add_txn_markers_to_send(
        7, markers("lost", 5, tp("a", 0), tp("a", 1)), txn_topic_partition=3
    )
    channel.add_txn_markers_to_send(7, markers("kept", 6, tp("a", 0)), txn_topic_partition=4)
    in_flight = channel.take_batch(1)
    assert in_flight is not None and len(in_flight) == 2
    channel.remove_markers_for_txn_topic_partition(3)
    assert channel.waiting_markers() == []  # lost's a-1 no longer waits for a leader
    assert channel.num_txns_with_pending_markers() == 1
    channel.handle_response(1, in_flight, [{tp("a", 0): E.none}, {tp("a", 0): E.none}])
    assert recorder.completed == ["kept"]  # the answer for the dropped transaction is ignored
    assert recorder.failed == []


def test_new_markers_for_a_transactional_id_replace_the_pending_ones() -> None:
    recorder = Recorder()
    channel, _ = manager(image(topic("a", 1)), recorder)
    channel.add_txn_markers_to_send(7, markers("t", 5, tp("a", 0)), txn_topic_partition=0)
    old = channel.take_batch(1)
    assert old is not None
    channel.add_txn_markers_to_send(8, markers("t", 5, tp("a", 0)), txn_topic_partition=0)
    channel.handle_response(1, old, [{tp("a", 0): E.none}])
    assert recorder.completed == []  # the answer to the replaced markers
    answer(channel, 1, {tp("a", 0): E.none})
    assert recorder.completed == ["t"]


class LocalWrites:
    """Stands for the broker's in-place marker writer: records what it is given and answers
    when the test says."""

    def __init__(self) -> None:
        self.submitted: list[tuple[TxnMarkerEntry, MarkerDone]] = []

    def submit(self, entry: TxnMarkerEntry, on_done: MarkerDone) -> None:
        self.submitted.append((entry, on_done))


def test_markers_of_partitions_this_broker_leads_are_written_in_place() -> None:
    recorder, local = Recorder(), LocalWrites()
    cache = MetadataCache(1)
    cache.set_image(image(topic("a", 1, 2)))
    channel = TransactionMarkerChannelManager(
        broker_id=1,
        metadata_cache=cache,
        inter_broker_listener_name=LISTENER,
        on_complete=recorder.completed.append,
        retry_backoff_ms=0,
        local_writer=local,
    )
    channel.add_txn_markers_to_send(
        7, markers("t1", 5, tp("a", 0), tp("a", 1)), txn_topic_partition=0
    )
    # broker 1's own partition is not queued for a request to itself; broker 2's is
    assert channel.queued_markers(1) == []
    assert [sorted(e.topic_partitions) for e in channel.queued_markers(2)] == [[tp("a", 1)]]
    ((written, on_done),) = local.submitted
    assert (written.topic_partitions, written.coordinator_epoch) == (frozenset({tp("a", 0)}), 7)

    on_done({tp("a", 0): E.not_enough_replicas}, None)  # retried
    channel.retry_due_markers()
    assert len(local.submitted) == 2
    local.submitted[1][1]({tp("a", 0): E.none}, None)
    answer(channel, 2, {tp("a", 1): E.none})
    assert recorder.completed == ["t1"]

    channel.add_txn_markers_to_send(7, markers("t2", 6, tp("a", 0)), txn_topic_partition=0)
    local.submitted[2][1](None, "the broker is stopping")
    channel.retry_due_markers()  # no answer: sent again, like a lost connection
    assert len(local.submitted) == 4 and recorder.completed == ["t1"]
