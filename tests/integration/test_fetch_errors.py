"""Fetch answers errors with an empty record set, as Kafka does, and real clients act on them.

A partition that answers an error (OFFSET_OUT_OF_RANGE, UNKNOWN_TOPIC_OR_PARTITION,
UNKNOWN_TOPIC_ID, CORRUPT_MESSAGE, KAFKA_STORAGE_ERROR...) carries records of length 0, never
null (-1): librdkafka cannot parse a null record set, so a confluent-kafka consumer positioned
past the end never saw OFFSET_OUT_OF_RANGE and never applied ``auto.offset.reset``.

The raw check reads the response bytes itself (not through a codec) for every Fetch version
the broker serves: int32 length 0 up to v11, compact length uvarint 1 (empty; 0 would be
null) from v12.
"""

from __future__ import annotations

import datetime
import struct
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CTopicPartition
from kio.schema.errors import ErrorCode

from storage_core.records import SimpleRecord, build_batch
from tests.broker_process import BrokerProcess
from tests.integration import raw_wire

pytestmark = pytest.mark.timeout(180)

TOPIC = "short"
RECORDS = 5
FETCH_VERSIONS = range(4, 17)
FIRST_FLEXIBLE_VERSION = 12
FIRST_TOPIC_ID_VERSION = 13
BEYOND_END = 1000
CLIENT_WAIT_S = 30.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    directory: Path = tmp_path_factory.mktemp("fetch-errors")
    with BrokerProcess(directory, overrides={"auto.create.topics.enable": "false"}) as process:
        raw_wire.create_topic(process.port, TOPIC)
        produce_raw(process, [f"record-{i}".encode() for i in range(RECORDS)])
        yield process


def produce_raw(broker: BrokerProcess, values: list[bytes]) -> int:
    """Produce one batch of ``values``; returns its base offset."""
    module = raw_wire.request_classes(0, 9)
    batch = build_batch([SimpleRecord(value=v, timestamp=int(time.time() * 1000)) for v in values])
    with raw_wire.connect(broker.port) as sock:
        body = raw_wire.call(
            sock,
            0,
            9,
            transactional_id=None,
            acks=-1,
            timeout=datetime.timedelta(seconds=5),
            topic_data=(
                module.TopicProduceData(
                    name=TOPIC,
                    partition_data=(module.PartitionProduceData(index=0, records=batch),),
                ),
            ),
        )
    (partition,) = body.responses[0].partition_responses
    assert partition.error_code == ErrorCode.none, partition
    return int(partition.base_offset)


def topic_id_of(broker: BrokerProcess, topic: str) -> uuid.UUID:
    module = raw_wire.request_classes(3, 12)
    with raw_wire.connect(broker.port) as sock:
        body = raw_wire.call(
            sock,
            3,
            12,
            topics=(module.MetadataRequestTopic(name=topic, topic_id=None),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    (found,) = body.topics
    assert found.error_code == ErrorCode.none
    return found.topic_id  # type: ignore[no-any-return]


# ---------------------------------------------------------------------------- raw frames
def fetch_frame(
    broker: BrokerProcess, version: int, *, topic: str, topic_id: uuid.UUID, offset: int
) -> bytes:
    """The raw response frame (after the size) of a one-partition Fetch of ``version``."""
    module = raw_wire.request_classes(1, version)
    partition = raw_wire.build(
        module.FetchPartition,
        partition=0,
        current_leader_epoch=-1,
        fetch_offset=offset,
        last_fetched_epoch=-1,
        log_start_offset=-1,
        partition_max_bytes=1 << 20,
    )
    fetch_topic = raw_wire.build(
        module.FetchTopic, topic=topic, topic_id=topic_id, partitions=(partition,)
    )
    request = raw_wire.request_bytes(
        1,
        version,
        5,
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=10),
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(fetch_topic,),
        forgotten_topics_data=(),
        rack_id="",
    )
    with raw_wire.connect(broker.port) as sock:
        sock.sendall(request)
        (size,) = struct.unpack(">i", raw_wire.recv_exactly(sock, 4))
        return raw_wire.recv_exactly(sock, size)


def _uvarint(frame: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = frame[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def partition_error_and_records_field(frame: bytes, version: int) -> tuple[int, int]:
    """``(error code, records length field as sent)`` of the first partition of the first
    topic, read from the bytes as the FetchResponse schema lays them out."""
    flexible = version >= FIRST_FLEXIBLE_VERSION
    pos = 4  # correlation id
    if flexible:
        pos += 1  # header tagged fields (none)
    pos += 4 + (6 if version >= 7 else 0)  # throttle, error code, session id
    topics, pos = (
        _uvarint(frame, pos) if flexible else (struct.unpack_from(">i", frame, pos)[0], pos + 4)
    )
    assert topics == (2 if flexible else 1)
    if version >= FIRST_TOPIC_ID_VERSION:
        pos += 16
    elif flexible:
        length, pos = _uvarint(frame, pos)
        pos += length - 1
    else:
        pos += 2 + struct.unpack_from(">h", frame, pos)[0]
    partitions, pos = (
        _uvarint(frame, pos) if flexible else (struct.unpack_from(">i", frame, pos)[0], pos + 4)
    )
    assert partitions == (2 if flexible else 1)
    _index, error_code = struct.unpack_from(">ih", frame, pos)
    pos += 6 + 16 + (8 if version >= 5 else 0)  # high watermark, LSO, log start offset
    if flexible:
        aborted, pos = _uvarint(frame, pos)
        assert aborted == 0, "aborted transactions: null expected with an error"
    else:
        (aborted,) = struct.unpack_from(">i", frame, pos)
        pos += 4
        assert aborted == -1, "aborted transactions: null expected with an error"
    if version >= 11:
        pos += 4  # preferred read replica
    if flexible:
        records_field, pos = _uvarint(frame, pos)
    else:
        (records_field,) = struct.unpack_from(">i", frame, pos)
    return error_code, records_field


@pytest.mark.parametrize("version", FETCH_VERSIONS)
@pytest.mark.parametrize(
    ("where", "error"),
    [
        ("past the end", ErrorCode.offset_out_of_range),
        ("unknown topic", ErrorCode.unknown_topic_or_partition),
    ],
)
def test_an_error_partition_carries_an_empty_record_set(
    broker: BrokerProcess, version: int, where: str, error: ErrorCode
) -> None:
    topic_id = topic_id_of(broker, TOPIC)
    if where == "past the end":
        frame = fetch_frame(broker, version, topic=TOPIC, topic_id=topic_id, offset=BEYOND_END)
    else:
        frame = fetch_frame(broker, version, topic="no-such-topic", topic_id=uuid.uuid4(), offset=0)
        if version >= FIRST_TOPIC_ID_VERSION:
            error = ErrorCode.unknown_topic_id
    error_code, records_field = partition_error_and_records_field(frame, version)
    assert error_code == error.value
    empty = 1 if version >= FIRST_FLEXIBLE_VERSION else 0  # compact: length + 1; null is 0
    assert records_field == empty, f"Fetch v{version}: records length field {records_field}"


# ---------------------------------------------------------------------------- librdkafka
def _consumer(reset: str) -> dict[str, object]:
    return {
        "group.id": f"reset-{reset}-{uuid.uuid4()}",
        "auto.offset.reset": reset,
        "enable.auto.commit": False,
    }


def test_confluent_consumer_past_the_end_resets_to_earliest(broker: BrokerProcess) -> None:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, **_consumer("earliest")})
    consumer.assign([CTopicPartition(TOPIC, 0, BEYOND_END)])
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + CLIENT_WAIT_S
    try:
        while len(got) < RECORDS and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            got.append((message.offset(), message.value()))
    finally:
        consumer.close()
    assert got[:RECORDS] == [(i, f"record-{i}".encode()) for i in range(RECORDS)]


def test_confluent_consumer_past_the_end_resets_to_latest(broker: BrokerProcess) -> None:
    """After the reset the consumer sits at the end: it reads what is produced from then on.

    Records are produced one by one until the consumer gets one, so the test does not depend
    on when the reset happens; the first record it reads must be one of them.
    """
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, **_consumer("latest")})
    consumer.assign([CTopicPartition(TOPIC, 0, BEYOND_END)])
    produced: dict[int, bytes] = {}
    first: tuple[int, bytes] | None = None
    deadline = time.monotonic() + CLIENT_WAIT_S
    try:
        while first is None and time.monotonic() < deadline:
            value = f"late-{len(produced)}".encode()
            produced[produce_raw(broker, [value])] = value
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            first = (message.offset(), message.value())
    finally:
        consumer.close()
    assert first is not None, "the consumer never left the out-of-range offset"
    assert first[0] >= RECORDS
    assert produced.get(first[0]) == first[1]


def session_fetch(
    broker: BrokerProcess, *, session_id: int, session_epoch: int, replica_id: int, topics: bool
) -> Any:
    """A Fetch v12 in (or asking for) a fetch session, and its decoded answer."""
    module = raw_wire.request_classes(1, 12)
    partition = raw_wire.build(
        module.FetchPartition,
        partition=0,
        current_leader_epoch=-1,
        fetch_offset=0,
        last_fetched_epoch=-1,
        log_start_offset=-1,
        partition_max_bytes=1 << 20,
    )
    fetch_topic = raw_wire.build(module.FetchTopic, topic=TOPIC, partitions=(partition,))
    with raw_wire.connect(broker.port) as sock:
        return raw_wire.call(
            sock,
            1,
            12,
            replica_id=replica_id,
            max_wait=datetime.timedelta(milliseconds=10),
            min_bytes=1,
            max_bytes=1 << 20,
            isolation_level=0,
            session_id=session_id,
            session_epoch=session_epoch,
            topics=(fetch_topic,) if topics else (),
            forgotten_topics_data=(),
            rack_id="",
        )


@pytest.mark.parametrize("replica_id", [-1, 1])
def test_an_unknown_fetch_session_is_refused(broker: BrokerProcess, replica_id: int) -> None:
    """An incremental fetch of a session the broker does not hold (evicted, or from before
    a restart) is FETCH_SESSION_ID_NOT_FOUND with no partitions: the fetcher starts over."""
    answer = session_fetch(
        broker, session_id=123_456, session_epoch=3, replica_id=replica_id, topics=False
    )
    assert answer.error_code == ErrorCode.fetch_session_id_not_found
    assert (answer.session_id, answer.responses) == (0, ())


def test_a_consumer_asking_for_a_session_is_answered_in_full_without_one(
    broker: BrokerProcess,
) -> None:
    answer = session_fetch(broker, session_id=0, session_epoch=0, replica_id=-1, topics=True)
    assert (answer.error_code, answer.session_id) == (ErrorCode.none, 0)
    (topic,) = answer.responses
    assert [p.partition_index for p in topic.partitions] == [0]
    assert topic.partitions[0].error_code == ErrorCode.none
