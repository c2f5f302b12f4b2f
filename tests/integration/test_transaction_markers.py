"""The log side of transactions on a real broker process: transactional batches, the
WriteTxnMarkers a coordinator sends, the last stable offset, and what read_committed and
read_uncommitted consumers (confluent-kafka, kafka-python) read.

The producer id comes from an idempotent InitProducerId and the batches and markers are
sent over raw sockets, as a transactional producer and its coordinator would send them,
without a transactional id or AddPartitionsToTxn: the brokers of these tests do not verify
transactions (``NO_VERIFICATION``, KIP-890 part 1), which is what they test the log side
without. ``test_transaction_verification.py`` tests the verification.
"""

from __future__ import annotations

import datetime
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from kio.schema.errors import ErrorCode

from storage_core.records import SimpleRecord, build_batch
from tests.broker_process import BrokerProcess
from tests.integration import raw_wire

pytestmark = pytest.mark.timeout(120)

PRODUCE_V, FETCH_V, LIST_OFFSETS_V, INIT_PID_V, MARKERS_V = 9, 12, 7, 4, 1
COORDINATOR_EPOCH = 3

NO_VERIFICATION = {"transaction.partition.verification.enable": "false"}
"""Broker settings for ``Wire``'s transactional batches: they open transactions that no
coordinator knows of, which a verifying broker refuses (INVALID_TXN_STATE), as Kafka 3.6+."""


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(
        tmp_path, overrides={"auto.create.topics.enable": "false", **NO_VERIFICATION}
    ) as process:
        yield process


class Wire:
    """One connection to the broker, speaking as a transactional producer, its coordinator
    and a consumer would."""

    def __init__(self, port: int, topic: str) -> None:
        self.sock: socket.socket = raw_wire.connect(port)
        self.topic = topic
        self.sequences: dict[int, int] = {}

    def close(self) -> None:
        self.sock.close()

    def producer_id(self) -> tuple[int, int]:
        body = raw_wire.call(
            self.sock,
            22,
            INIT_PID_V,
            transactional_id=None,
            transaction_timeout=datetime.timedelta(seconds=60),
            producer_id=-1,
            producer_epoch=-1,
        )
        assert body.error_code == ErrorCode.none
        return int(body.producer_id), int(body.producer_epoch)

    def produce(
        self,
        producer: tuple[int, int],
        *values: bytes,
        transactional: bool,
        timestamp_ms: int = -1,  # none, as a producer may send
    ) -> int:
        pid, epoch = producer
        sequence = self.sequences.get(pid, 0)
        self.sequences[pid] = sequence + len(values)
        batch = build_batch(
            [SimpleRecord(value=v, timestamp=timestamp_ms) for v in values],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=sequence,
            is_transactional=transactional,
        )
        module = raw_wire.request_classes(0, PRODUCE_V)
        body = raw_wire.call(
            self.sock,
            0,
            PRODUCE_V,
            transactional_id=None,
            acks=-1,
            timeout=datetime.timedelta(seconds=10),
            topic_data=(
                module.TopicProduceData(
                    name=self.topic,
                    partition_data=(module.PartitionProduceData(index=0, records=batch),),
                ),
            ),
        )
        (answer,) = body.responses[0].partition_responses
        assert answer.error_code == ErrorCode.none, answer
        return int(answer.base_offset)

    def end(
        self,
        producer: tuple[int, int],
        *,
        commit: bool,
        coordinator_epoch: int = COORDINATOR_EPOCH,
        topic: str | None = None,
    ) -> ErrorCode:
        module = raw_wire.request_classes(27, MARKERS_V)
        body = raw_wire.call(
            self.sock,
            27,
            MARKERS_V,
            markers=(
                module.WritableTxnMarker(
                    producer_id=producer[0],
                    producer_epoch=producer[1],
                    transaction_result=commit,
                    topics=(
                        module.WritableTxnMarkerTopic(
                            name=topic or self.topic, partition_indexes=(0,)
                        ),
                    ),
                    coordinator_epoch=coordinator_epoch,
                ),
            ),
        )
        (marker,) = body.markers
        assert marker.producer_id == producer[0]
        (partition,) = marker.topics[0].partitions
        return partition.error_code

    def latest(self, isolation_level: int) -> int:
        module = raw_wire.request_classes(2, LIST_OFFSETS_V)
        body = raw_wire.call(
            self.sock,
            2,
            LIST_OFFSETS_V,
            replica_id=-1,
            isolation_level=isolation_level,
            topics=(
                module.ListOffsetsTopic(
                    name=self.topic,
                    partitions=(
                        module.ListOffsetsPartition(
                            partition_index=0, current_leader_epoch=-1, timestamp=-1
                        ),
                    ),
                ),
            ),
        )
        return int(body.topics[0].partitions[0].offset)

    def producers(self, partition: int = 0) -> tuple[ErrorCode, dict[int, tuple[int, ...]]]:
        """DescribeProducers: producer id -> (epoch, last sequence, coordinator epoch, first
        offset of its open transaction)."""
        module = raw_wire.request_classes(61, 0)
        body = raw_wire.call(
            self.sock,
            61,
            0,
            topics=(module.TopicRequest(name=self.topic, partition_indexes=(partition,)),),
        )
        (answer,) = body.topics[0].partitions
        return answer.error_code, {
            int(p.producer_id): (
                int(p.producer_epoch),
                int(p.last_sequence),
                int(p.coordinator_epoch),
                int(p.current_txn_start_offset),
            )
            for p in answer.active_producers
        }

    def fetch(self, isolation_level: int) -> object:
        module = raw_wire.request_classes(1, FETCH_V)
        body = raw_wire.call(
            self.sock,
            1,
            FETCH_V,
            replica_id=-1,
            max_wait=datetime.timedelta(milliseconds=0),
            min_bytes=0,
            max_bytes=1 << 20,
            isolation_level=isolation_level,
            session_id=0,
            session_epoch=-1,
            topics=(
                module.FetchTopic(
                    topic=self.topic,
                    partitions=(
                        module.FetchPartition(
                            partition=0, fetch_offset=0, partition_max_bytes=1 << 20
                        ),
                    ),
                ),
            ),
            forgotten_topics_data=(),
            rack_id="",
        )
        return body.responses[0].partitions[0]


def consume(bootstrap: str, topic: str, isolation: str, end: int) -> list[bytes]:
    """Every record a confluent-kafka consumer at ``isolation`` reads before ``end``."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{isolation}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    try:
        for _ in range(100):
            message = consumer.poll(1.0)
            if message is None:
                continue
            if message.error() is not None:
                position = consumer.position([TopicPartition(topic, 0)])[0].offset
                if position >= end:
                    break
                continue
            values.append(message.value())
    finally:
        consumer.close()
    return values


def test_read_committed_reads_below_the_lso_and_skips_aborted_transactions(
    broker: BrokerProcess,
) -> None:
    raw_wire.create_topic(broker.port, "txn")
    wire = Wire(broker.port, "txn")
    committed, aborted, open_ = wire.producer_id(), wire.producer_id(), wire.producer_id()
    assert wire.produce(committed, b"a1", b"a2", transactional=True) == 0
    assert wire.produce(aborted, b"b1", transactional=True) == 2
    # both open: nothing is stable yet
    assert (wire.latest(0), wire.latest(1)) == (3, 0)
    assert wire.end(committed, commit=True) == ErrorCode.none  # offset 3
    assert wire.latest(1) == 2  # the aborted producer's transaction still open from 2
    assert wire.end(aborted, commit=False) == ErrorCode.none  # offset 4
    assert wire.produce(open_, b"c1", transactional=True) == 5
    assert (wire.latest(0), wire.latest(1)) == (6, 5)
    # the hanging-transaction view: who is still open, and since when
    assert wire.producers() == (
        ErrorCode.none,
        {
            committed[0]: (0, 1, COORDINATOR_EPOCH, -1),
            aborted[0]: (0, 0, COORDINATOR_EPOCH, -1),
            open_[0]: (0, 0, -1, 5),
        },
    )
    assert wire.producers(partition=7)[0] == ErrorCode.unknown_topic_or_partition

    answer = wire.fetch(1)
    assert (answer.high_watermark, answer.last_stable_offset) == (6, 5)
    assert [(a.producer_id, a.first_offset) for a in answer.aborted_transactions] == [
        (aborted[0], 2)
    ]
    uncommitted = wire.fetch(0)
    assert uncommitted.last_stable_offset == 5
    wire.close()

    assert consume(broker.bootstrap, "txn", "read_committed", 5) == [b"a1", b"a2"]
    assert consume(broker.bootstrap, "txn", "read_uncommitted", 6) == [b"a1", b"a2", b"b1", b"c1"]

    # SIGKILL: the open transaction, the LSO and the aborted one survive the recovery
    broker.kill()
    broker.start()
    wire = Wire(broker.port, "txn")
    answer = wire.fetch(1)
    assert (answer.high_watermark, answer.last_stable_offset) == (6, 5)
    assert [(a.producer_id, a.first_offset) for a in answer.aborted_transactions] == [
        (aborted[0], 2)
    ]
    assert wire.end(open_, commit=True) == ErrorCode.none  # offset 6
    assert wire.latest(1) == 7
    wire.close()
    assert consume(broker.bootstrap, "txn", "read_committed", 7) == [b"a1", b"a2", b"c1"]


def test_stale_markers_are_refused_and_write_nothing(broker: BrokerProcess) -> None:
    raw_wire.create_topic(broker.port, "fenced")
    wire = Wire(broker.port, "fenced")
    pid, _ = wire.producer_id()
    producer = (pid, 1)  # an epoch bump, as after a producer's restart
    wire.produce(producer, b"x", transactional=True)
    assert wire.end(producer, commit=True) == ErrorCode.none  # coordinator epoch 3 seen
    wire.produce(producer, b"y", transactional=True)  # offset 2
    # a deposed coordinator (epoch 2) and a fenced producer epoch are refused
    assert (
        wire.end(producer, commit=False, coordinator_epoch=COORDINATOR_EPOCH - 1)
        == ErrorCode.transaction_coordinator_fenced
    )
    assert wire.end((pid, 0), commit=False) == ErrorCode.invalid_producer_epoch
    assert wire.end((pid, -1), commit=False) == ErrorCode.unknown_server_error
    assert wire.end(producer, commit=False, topic="missing") == (
        ErrorCode.unknown_topic_or_partition
    )
    assert (wire.latest(0), wire.latest(1)) == (3, 2)  # no marker written
    assert wire.end(producer, commit=False) == ErrorCode.none
    assert (wire.latest(0), wire.latest(1)) == (4, 4)
    wire.close()
    assert consume(broker.bootstrap, "fenced", "read_committed", 4) == [b"x"]
