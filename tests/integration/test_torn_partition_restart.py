"""A damaged partition found at start-up keeps only itself down, never the broker.

A real broker process hosts one topic with three partitions, written by kafka-python with
``acks=all`` (one record batch per send). After a clean stop (the clean-shutdown marker is
left), a partition's files are damaged while the broker is down; the restarted broker must
listen and serve every other partition whole:

- an active segment cut in the middle of its last batch is recovered to the last complete
  batch, and the cut bytes are kept aside as ``*.quarantined``;
- a partition whose log cannot be loaded at all is taken offline: Produce and Fetch to it get
  KAFKA_STORAGE_ERROR, Metadata lists it without a leader and with the broker offline.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from tests.broker_process import BrokerProcess
from tests.integration import raw_wire

pytestmark = pytest.mark.timeout(180)

TOPIC = "torn"
PARTITIONS = (0, 1, 2)
DAMAGED = 1
BATCHES = 12
LOG_OVERHEAD = 12  # base offset (8) + batch length (4)
KAFKA_STORAGE_ERROR = 56
LEADER_NOT_AVAILABLE = 5


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path) as process:
        raw_wire.create_topic(process.port, TOPIC, partitions=len(PARTITIONS))
        yield process


def produce(broker: BrokerProcess) -> dict[int, list[tuple[int, bytes]]]:
    """``BATCHES`` acknowledged single-record batches per partition: (offset, value)."""
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap, acks="all", linger_ms=0, request_timeout_ms=10_000
    )
    acked: dict[int, list[tuple[int, bytes]]] = {p: [] for p in PARTITIONS}
    for i in range(BATCHES):
        for partition in PARTITIONS:
            value = f"p{partition}-r{i}-".encode() * 40
            meta = producer.send(TOPIC, value=value, partition=partition).get(timeout=20)
            acked[partition].append((meta.offset, value))
    producer.close(10)
    return acked


def consume(broker: BrokerProcess, partition: int, expected: int) -> list[tuple[int, bytes]]:
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False
    )
    tp = TopicPartition(TOPIC, partition)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    found: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 30
    while len(found) < expected and time.monotonic() < deadline:
        for messages in consumer.poll(timeout_ms=500).values():
            found.extend((m.offset, m.value) for m in messages)
    end = consumer.end_offsets([tp])[tp]
    consumer.close()
    assert end == expected, f"{tp}: log end offset {end}, expected {expected}"
    return found


def batch_positions(path: Path) -> list[int]:
    """Byte positions of the batches of a ``.log`` file, read from their length fields."""
    data = path.read_bytes()
    positions: list[int] = []
    position = 0
    while position + LOG_OVERHEAD <= len(data):
        positions.append(position)
        position += LOG_OVERHEAD + int.from_bytes(data[position + 8 : position + 12], "big")
    assert position == len(data), "the segment must end on a batch boundary before the cut"
    return positions


def active_segment(broker: BrokerProcess, partition: int) -> Path:
    return sorted((broker.log_dir / f"{TOPIC}-{partition}").glob("*.log"))[-1]


def test_active_segment_cut_mid_batch_after_clean_stop(broker: BrokerProcess) -> None:
    acked = produce(broker)
    assert broker.stop() == 0
    assert (broker.log_dir / ".kafka_cleanshutdown").exists()
    segment = active_segment(broker, DAMAGED)
    original = segment.read_bytes()
    last = batch_positions(segment)[-1]
    cut_at = last + (len(original) - last) // 2
    with open(segment, "r+b") as file:
        file.truncate(cut_at)

    broker.start()  # before the fix: exit 2, "truncated batch: ... bytes present"

    for partition in PARTITIONS:
        expected = acked[partition][:-1] if partition == DAMAGED else acked[partition]
        assert consume(broker, partition, len(expected)) == expected, partition
    assert segment.read_bytes() == original[:last]
    kept = segment.with_name(f"{segment.name}.at-{last}.quarantined")
    assert kept.read_bytes() == original[last:cut_at], "the cut bytes must be kept"
    output = broker.output()
    assert "does not read cleanly after a clean shutdown" in output
    assert f"partition={TOPIC}-{DAMAGED}" in output

    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    meta = producer.send(TOPIC, value=b"after", partition=DAMAGED).get(timeout=20)
    producer.close(10)
    assert meta.offset == BATCHES - 1, "the recovered partition takes writes at its new end"


def metadata_partitions(broker: BrokerProcess) -> dict[int, object]:
    module = raw_wire.request_classes(3, 12)
    with raw_wire.connect(broker.port) as sock:
        body = raw_wire.call(
            sock,
            3,
            12,
            topics=(module.MetadataRequestTopic(name=TOPIC, topic_id=None),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    return {p.partition_index: p for p in body.topics[0].partitions}


def test_unloadable_partition_goes_offline_alone(broker: BrokerProcess) -> None:
    acked = produce(broker)
    assert broker.stop() == 0
    damaged_dir = broker.log_dir / f"{TOPIC}-{DAMAGED}"
    files_before = {p.name: p.read_bytes() for p in damaged_dir.iterdir()}
    (damaged_dir / "partition.metadata").write_text("not a partition metadata file\n")
    files_before["partition.metadata"] = (damaged_dir / "partition.metadata").read_bytes()

    broker.start()

    for partition in PARTITIONS:
        if partition != DAMAGED:
            assert consume(broker, partition, BATCHES) == acked[partition]
    partitions = metadata_partitions(broker)
    offline = partitions[DAMAGED]
    assert offline.error_code == LEADER_NOT_AVAILABLE  # type: ignore[attr-defined]
    assert offline.leader_id == -1  # type: ignore[attr-defined]
    assert list(offline.offline_replicas) == [0]  # type: ignore[attr-defined]
    assert partitions[0].error_code == 0  # type: ignore[attr-defined]

    module = raw_wire.request_classes(2, 5)
    with raw_wire.connect(broker.port) as sock:
        body = raw_wire.call(
            sock,
            2,
            5,
            replica_id=-1,
            isolation_level=0,
            topics=(
                module.ListOffsetsTopic(
                    name=TOPIC,
                    partitions=(
                        module.ListOffsetsPartition(
                            partition_index=DAMAGED, current_leader_epoch=-1, timestamp=-1
                        ),
                    ),
                ),
            ),
        )
    assert body.topics[0].partitions[0].error_code == KAFKA_STORAGE_ERROR
    fetch = raw_wire.request_classes(1, 4)
    with raw_wire.connect(broker.port) as sock:
        body = raw_wire.call(
            sock,
            1,
            4,
            max_wait=datetime.timedelta(milliseconds=10),
            min_bytes=0,
            topics=(
                fetch.FetchTopic(
                    topic=TOPIC,
                    partitions=(
                        fetch.FetchPartition(
                            partition=DAMAGED, fetch_offset=0, partition_max_bytes=1 << 20
                        ),
                    ),
                ),
            ),
        )
    assert body.responses[0].partitions[0].error_code == KAFKA_STORAGE_ERROR
    # Nothing in the offline partition's directory was touched.
    assert {p.name: p.read_bytes() for p in damaged_dir.iterdir()} == files_before
    assert "partition taken offline" in broker.output()
