"""Produced batches are validated record by record before anything is stored, as Kafka does.

Each bad batch below has a valid CRC (recomputed after the damage), so only a look inside
finds it. Before the broker looked inside, every one of them was stored, and one such batch
stopped kafka-python and confluent-kafka consumers at its offset for good. Now each is refused
with the error Kafka answers (INVALID_RECORD naming the record in ``record_errors``, or
CORRUPT_MESSAGE for bytes that cannot be decoded), nothing of it is stored, the other
partition of the same request is appended, and both consumers read the partition through.

A batch whose header ``maxTimestamp`` is below one of its records' timestamps (KafkaJS sends
such headers) is stored with the max timestamp recomputed from its records, so ListOffsets by
that record's timestamp finds it.
"""

from __future__ import annotations

import datetime
import random
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CTopicPartition
from crc32c import crc32c
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition
from kafka.record.default_records import DefaultRecordBatch
from kio.schema.errors import ErrorCode

from storage_core.records import CompressionType, SimpleRecord, build_batch
from tests.broker_process import BrokerProcess
from tests.integration import raw_wire

pytestmark = pytest.mark.timeout(240)

TOPIC = "validated"
TIMES_TOPIC = "times"
PRODUCE_V = 9  # flexible, with record_errors (v8+)
HEADER = struct.Struct(">qiibIhiqqqhii")
ATTRIBUTES_AT = 21
CLIENT_WAIT_S = 30.0
BASE_MS = 1_700_000_000_000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    directory: Path = tmp_path_factory.mktemp("produce-validation")
    with BrokerProcess(directory, overrides={"auto.create.topics.enable": "false"}) as process:
        raw_wire.create_topic(process.port, TOPIC, partitions=2)
        raw_wire.create_topic(process.port, TIMES_TOPIC)
        yield process


# ---------------------------------------------------------------------------- batches
def good_batch(tag: str, count: int = 3, *, key: bytes | None = b"key") -> bytes:
    return build_batch(
        [
            SimpleRecord(key=key, value=f"{tag}-{i}".encode(), timestamp=BASE_MS + i)
            for i in range(count)
        ]
    )


def with_crc(batch: bytes | bytearray) -> bytes:
    """The batch with its CRC recomputed, so that only its insides are wrong."""
    out = bytearray(batch)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[ATTRIBUTES_AT:])))
    return bytes(out)


def with_header(batch: bytes, **changes: int) -> bytes:
    names = [
        "base_offset",
        "batch_length",
        "epoch",
        "magic",
        "crc",
        "attributes",
        "last_offset_delta",
        "base_timestamp",
        "max_timestamp",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "records_count",
    ]
    fields = dict(zip(names, HEADER.unpack_from(batch), strict=True))
    fields.update(changes)
    return with_crc(HEADER.pack(*fields.values()) + batch[HEADER.size :])


def negative_record_length() -> bytes:
    batch = bytearray(good_batch("neg", 1))
    assert batch[61] < 0x80  # a one-byte length varint
    batch[61] = 9  # zigzag -5
    return with_crc(batch)


def key_length_minus_two() -> bytes:
    batch = bytearray(good_batch("key", 1, key=None))
    # length, attributes, timestamp delta 0, offset delta 0, then the key length -1 (0x01)
    assert batch[61 + 4] == 0x01
    batch[61 + 4] = 0x03  # zigzag -2: same size, so only the key length is wrong
    return with_crc(batch)


def random_records(seed: int) -> Callable[[], bytes]:
    def build() -> bytes:
        rng = random.Random(seed)
        batch = good_batch("random", 3)
        body = bytes(rng.getrandbits(8) for _ in range(len(batch) - 61))
        return with_crc(batch[:61] + body)

    return build


def codec(codec_id: int) -> Callable[[], bytes]:
    def build() -> bytes:
        attributes = HEADER.unpack_from(good_batch("codec"))[5]
        return with_header(good_batch("codec"), attributes=(attributes & ~0x07) | codec_id)

    return build


def gzip_flag_on_plain_records() -> bytes:
    return with_header(good_batch("gzip"), attributes=int(CompressionType.GZIP))


def control_batch() -> bytes:
    marker = SimpleRecord(key=b"\x00\x00\x00\x01", value=b"\x00\x00\x00\x00\x00\x00")
    return build_batch([marker], is_control=True, producer_id=4242, producer_epoch=0)


def transactional_without_producer_id() -> bytes:
    return with_header(good_batch("txn"), attributes=0x10)


def fewer_records_than_counted() -> bytes:
    return with_header(good_batch("count", 2), records_count=3, last_offset_delta=2)


def offset_deltas_out_of_order() -> bytes:
    batch = bytearray(good_batch("delta", 2))
    first_length = batch[61] >> 1
    second = 61 + 1 + first_length
    # second record: length, attributes, timestamp delta (1 byte), offset delta 1 -> 5
    assert batch[second + 3] == 0x02
    batch[second + 3] = 0x0A
    return with_crc(batch)


def base_offset_not_zero() -> bytes:
    return with_header(good_batch("base"), base_offset=17)


BAD_BATCHES: dict[str, tuple[Callable[[], bytes], ErrorCode, int | None]] = {
    # name: (batch, error, index of the record named in record_errors or None for none)
    "negative record length": (negative_record_length, ErrorCode.invalid_record, 0),
    "key length -2": (key_length_minus_two, ErrorCode.invalid_record, 0),
    "random record bytes 1": (random_records(1), ErrorCode.invalid_record, 0),
    "random record bytes 2": (random_records(2), ErrorCode.invalid_record, 0),
    "random record bytes 3": (random_records(3), ErrorCode.invalid_record, 0),
    "codec 5": (codec(5), ErrorCode.corrupt_message, None),
    "codec 6": (codec(6), ErrorCode.corrupt_message, None),
    "codec 7": (codec(7), ErrorCode.corrupt_message, None),
    "gzip flag on plain records": (gzip_flag_on_plain_records, ErrorCode.corrupt_message, None),
    "control batch": (control_batch, ErrorCode.invalid_record, None),
    "transactional without producer id": (
        transactional_without_producer_id,
        ErrorCode.invalid_record,
        None,
    ),
    "fewer records than counted": (fewer_records_than_counted, ErrorCode.invalid_record, 2),
    "offset deltas out of order": (offset_deltas_out_of_order, ErrorCode.invalid_record, 1),
    "base offset not 0": (base_offset_not_zero, ErrorCode.invalid_record, None),
}


# ---------------------------------------------------------------------------- wire
def produce(
    broker: BrokerProcess, topic: str, records_by_partition: dict[int, bytes], version: int
) -> dict[int, object]:
    module = raw_wire.request_classes(0, version)
    with raw_wire.connect(broker.port) as sock:
        body = raw_wire.call(
            sock,
            0,
            version,
            transactional_id=None,
            acks=-1,
            timeout=datetime.timedelta(seconds=5),
            topic_data=(
                module.TopicProduceData(
                    name=topic,
                    partition_data=tuple(
                        module.PartitionProduceData(index=index, records=records)
                        for index, records in records_by_partition.items()
                    ),
                ),
            ),
        )
    (topic_response,) = body.responses
    return {p.index: p for p in topic_response.partition_responses}


def end_offset(broker: BrokerProcess, topic: str, partition: int) -> int:
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None)
    try:
        tp = KTopicPartition(topic, partition)
        return int(consumer.end_offsets([tp])[tp])
    finally:
        consumer.close()


def read_kafka_python(broker: BrokerProcess, topic: str, partition: int, end: int) -> list:
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False
    )
    tp = KTopicPartition(topic, partition)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + CLIENT_WAIT_S
    try:
        while len(got) < end and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got.extend((r.offset, r.value) for r in records)
    finally:
        consumer.close()
    return got


def read_confluent(broker: BrokerProcess, topic: str, partition: int, end: int) -> list:
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"validated-{time.monotonic_ns()}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([CTopicPartition(topic, partition, 0)])
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + CLIENT_WAIT_S
    try:
        while len(got) < end and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            got.append((message.offset(), message.value()))
    finally:
        consumer.close()
    return got


# ---------------------------------------------------------------------------- tests
@pytest.mark.parametrize("name", list(BAD_BATCHES))
def test_a_bad_batch_is_refused_and_the_other_partition_is_appended(
    broker: BrokerProcess, name: str
) -> None:
    build, error, record_index = BAD_BATCHES[name]
    before = end_offset(broker, TOPIC, 0)
    responses = produce(broker, TOPIC, {0: build(), 1: good_batch(f"beside-{name}")}, PRODUCE_V)

    refused = responses[0]
    assert refused.error_code == error, refused
    assert refused.base_offset == -1
    assert refused.error_message
    if record_index is None:
        assert refused.record_errors == ()
    else:
        (record_error,) = refused.record_errors
        assert record_error.batch_index == record_index
        assert f"record {record_index} " in (record_error.batch_index_error_message or "")
    assert end_offset(broker, TOPIC, 0) == before, "a refused batch was stored"
    assert responses[1].error_code == ErrorCode.none, responses[1]


def test_before_v8_the_error_comes_without_record_errors(broker: BrokerProcess) -> None:
    responses = produce(broker, TOPIC, {0: negative_record_length()}, 7)
    assert responses[0].error_code == ErrorCode.invalid_record


def test_both_consumers_read_through_a_partition_that_was_sent_every_bad_batch(
    broker: BrokerProcess,
) -> None:
    for index, (build, _error, _record) in enumerate(BAD_BATCHES.values()):
        produce(broker, TOPIC, {0: good_batch(f"good-{index}", 2)}, PRODUCE_V)
        produce(broker, TOPIC, {0: build()}, PRODUCE_V)
    produce(broker, TOPIC, {0: good_batch("last", 2)}, PRODUCE_V)
    end = end_offset(broker, TOPIC, 0)
    expected = read_kafka_python(broker, TOPIC, 0, end)
    assert [offset for offset, _ in expected] == list(range(end))
    assert expected[-1][1] == b"last-1"
    assert read_confluent(broker, TOPIC, 0, end) == expected


# ---------------------------------------------------------------------------- timestamps
@pytest.mark.parametrize("compression", [CompressionType.NONE, CompressionType.GZIP])
def test_a_max_timestamp_below_a_record_is_recomputed(
    broker: BrokerProcess, compression: CompressionType
) -> None:
    """KafkaJS-style header: maxTimestamp is the first record's, not the largest."""
    base = int(time.time() * 1000) + (0 if compression == CompressionType.NONE else 60_000)
    timestamps = [base, base + 5_000, base + 2_000]
    batch = build_batch(
        [SimpleRecord(value=f"t{i}".encode(), timestamp=ts) for i, ts in enumerate(timestamps)],
        compression=compression,
    )
    low = with_header(batch, max_timestamp=base)
    (response,) = produce(broker, TIMES_TOPIC, {0: low}, PRODUCE_V).values()
    assert response.error_code == ErrorCode.none
    first = int(response.base_offset)

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None)
    tp = KTopicPartition(TIMES_TOPIC, 0)
    try:
        found = consumer.offsets_for_times({tp: base + 3_000})[tp]
    finally:
        consumer.close()
    assert found is not None, "ListOffsets by timestamp skipped the record"
    assert (found.offset, found.timestamp) == (first + 1, base + 5_000)

    confluent = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "times"})
    try:
        [by_time] = confluent.offsets_for_times(
            [CTopicPartition(TIMES_TOPIC, 0, base + 3_000)], timeout=10
        )
    finally:
        confluent.close()
    assert by_time.offset == first + 1

    stored = fetch_batch(broker, TIMES_TOPIC, first)
    assert stored.max_timestamp == base + 5_000
    assert stored.validate_crc()


def fetch_batch(broker: BrokerProcess, topic: str, offset: int) -> DefaultRecordBatch:
    """The stored batch at ``offset``, parsed by kafka-python's independent codec."""
    module = raw_wire.request_classes(1, 12)
    with raw_wire.connect(broker.port) as sock:
        body = raw_wire.call(
            sock,
            1,
            12,
            replica_id=-1,
            max_wait=datetime.timedelta(milliseconds=10),
            min_bytes=1,
            max_bytes=1 << 20,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=(
                module.FetchTopic(
                    topic=topic,
                    partitions=(
                        raw_wire.build(
                            module.FetchPartition,
                            partition=0,
                            current_leader_epoch=-1,
                            fetch_offset=offset,
                            last_fetched_epoch=-1,
                            log_start_offset=-1,
                            partition_max_bytes=1 << 20,
                        ),
                    ),
                ),
            ),
            forgotten_topics_data=(),
            rack_id="",
        )
    records = body.responses[0].partitions[0].records
    size = struct.unpack_from(">i", records, 8)[0] + 12
    return DefaultRecordBatch(bytes(records[:size]))
