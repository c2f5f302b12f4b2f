"""Thousands of malformed frames against a real broker process, then a real client round trip.

A seeded generator mutates real encoded requests of several APIs (Produce, Fetch, Metadata,
ListOffsets, OffsetForLeaderEpoch, InitProducerId, ApiVersions; flexible and legacy versions):
flipped bytes, truncations, absurd array counts and string lengths (int16, int32 and varint
forms), appended garbage, random bodies behind valid headers, and pure random bytes. Each frame
is followed by an ApiVersions probe on the same connection, so that every frame gets an
outcome: answered (the probe answer came back), closed by the broker, or still waiting (a
mutated Fetch may long-poll; the connection is dropped and the run moves on).

Afterwards the broker must be alive, its resident memory bounded, its log free of tracebacks
(every malformed input must end in a clean error or a one-line close), and kafka-python must
still produce and consume.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import random
import struct
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from storage_core.records import CompressionType, SimpleRecord, build_batch
from storage_core.server.handlers import build_registry
from storage_core.server.protocol import encode_request
from tests.broker_process import BrokerProcess
from tests.integration import raw_wire
from tests.integration.raw_wire import load_request_schema
from tests.kafka_samples import sample_message

pytestmark = pytest.mark.timeout(180)

SEED = 20_261_123
FRAMES = 8_000
EVERY_API_FRAMES = 12_000
WORKERS = 32
PROBE_TIMEOUT_S = 2.0
RSS_LIMIT_BYTES = 500 * 1024 * 1024
MAX_REQUEST_BYTES = 1 << 20
TOPIC = "fuzz"
PROBE_CORRELATION_ID = -7_777  # never produced by a mutation of the corpus' own ids

ABSURD_INT32 = (2**31 - 1, -(2**31), -2, 0x7FFF0000, 1 << 24)
ABSURD_INT16 = (0x7FFF, -2, -(2**15))
ABSURD_VARINT = (
    b"\xff\xff\xff\xff\x0f",  # 2**32 - 1: a compact count of 2**32 - 2
    b"\x80\x80\x80\x80\x08",  # 2**31
    b"\xff\xff\xff\xff\xff\xff\xff\xff\x7f",  # longer than any Kafka varint
    b"\x80\x80\x80\x01",
)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    directory: Path = tmp_path_factory.mktemp("fuzz")
    # Auto-creation is off: mutated names would otherwise create (valid) topics by the
    # thousand, which is what the setting is for and not malformed input.
    with BrokerProcess(
        directory,
        overrides={
            "socket.request.max.bytes": str(MAX_REQUEST_BYTES),
            "auto.create.topics.enable": "false",
        },
    ) as process:
        raw_wire.create_topic(process.port, TOPIC, partitions=2)
        yield process


def topic_id(port: int) -> uuid.UUID:
    module = raw_wire.request_classes(3, 12)
    with raw_wire.connect(port) as sock:
        body = raw_wire.call(
            sock,
            3,
            12,
            topics=(module.MetadataRequestTopic(name=TOPIC, topic_id=None),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    return uuid.UUID(str(body.topics[0].topic_id))


def corpus(port: int) -> list[bytes]:
    """Valid request frames (without the size prefix) of several APIs and versions."""
    tid = topic_id(port)
    batch = build_batch(
        [
            SimpleRecord(key=b"k%d" % i, value=b"v" * i, timestamp=1_700_000_000_000 + i)
            for i in range(5)
        ]
    )
    gzip_batch = build_batch(
        [SimpleRecord(key=None, value=b"z" * 300, timestamp=1_700_000_000_000)],
        compression=CompressionType.GZIP,
    )
    frames: list[bytes] = []

    def add(key: int, version: int, **fields: object) -> None:
        frames.append(raw_wire.request_bytes(key, version, len(frames) + 1, **fields)[4:])

    for version in (3, 7, 9, 11):
        module = raw_wire.request_classes(0, version)
        for records in (batch, gzip_batch):
            add(
                0,
                version,
                transactional_id=None,
                acks=-1 if version % 2 else 1,
                timeout=datetime.timedelta(seconds=1),
                topic_data=(
                    module.TopicProduceData(
                        name=TOPIC,
                        partition_data=tuple(
                            module.PartitionProduceData(index=p, records=records) for p in (0, 1)
                        ),
                    ),
                ),
            )
    for version in (4, 11, 12, 13, 15):
        module = raw_wire.request_classes(1, version)
        add(
            1,
            version,
            replica_id=-1,
            max_wait=datetime.timedelta(milliseconds=5),
            min_bytes=1,
            max_bytes=1 << 20,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=(
                raw_wire.build(
                    module.FetchTopic,
                    topic=TOPIC,
                    topic_id=tid,
                    partitions=tuple(
                        raw_wire.build(
                            module.FetchPartition,
                            partition=p,
                            current_leader_epoch=-1,
                            fetch_offset=0,
                            last_fetched_epoch=-1,
                            log_start_offset=-1,
                            partition_max_bytes=1 << 16,
                        )
                        for p in (0, 1)
                    ),
                ),
            ),
            forgotten_topics_data=(),
            rack_id="",
        )
    for version in (0, 1, 4, 9, 12):
        module = raw_wire.request_classes(3, version)
        add(
            3,
            version,
            topics=(
                raw_wire.build(module.MetadataRequestTopic, name=TOPIC, topic_id=None),
                raw_wire.build(module.MetadataRequestTopic, name="other", topic_id=None),
            ),
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
    for version in (1, 4, 7):
        module = raw_wire.request_classes(2, version)
        add(
            2,
            version,
            replica_id=-1,
            isolation_level=0,
            topics=(
                module.ListOffsetsTopic(
                    name=TOPIC,
                    partitions=tuple(
                        raw_wire.build(
                            module.ListOffsetsPartition,
                            partition_index=p,
                            current_leader_epoch=-1,
                            timestamp=-2,
                        )
                        for p in (0, 1)
                    ),
                ),
            ),
        )
    for version in (2, 4):
        module = raw_wire.request_classes(23, version)
        add(
            23,
            version,
            replica_id=-1,
            topics=(
                raw_wire.build(
                    module.OffsetForLeaderTopic,
                    topic=TOPIC,
                    partitions=(
                        module.OffsetForLeaderPartition(
                            partition=0, current_leader_epoch=-1, leader_epoch=0
                        ),
                    ),
                ),
            ),
        )
    add(22, 4, transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60))
    add(18, 3, client_software_name="fuzz", client_software_version="1")
    add(18, 0)
    return frames


def header_size(frame: bytes) -> int:
    (client_id_length,) = struct.unpack_from(">h", frame, 8)
    return 10 + max(client_id_length, 0)


def mutate(rng: random.Random, valid: list[bytes]) -> tuple[str, bytes]:
    """One malformed (or, by chance, still valid) frame and the name of the mutation."""
    base = bytearray(rng.choice(valid))
    start = header_size(bytes(base)) if rng.random() < 0.85 else 0
    if start >= len(base):  # an empty body (ApiVersions v0): mutate the header
        start = 0
    position = rng.randrange(start, len(base))
    kind = rng.choice(
        ["flip", "flip", "truncate", "int32", "int16", "varint", "append", "body", "random"]
    )
    if kind == "flip":
        for _ in range(rng.randint(1, 4)):
            base[rng.randrange(start, len(base))] ^= rng.randint(1, 255)
    elif kind == "truncate":
        del base[rng.randint(max(start - 2, 0), len(base) - 1) :]
    elif kind == "int32":
        base[position : position + 4] = struct.pack(">i", rng.choice(ABSURD_INT32))
    elif kind == "int16":
        base[position : position + 2] = struct.pack(">h", rng.choice(ABSURD_INT16))
    elif kind == "varint":
        base[position : position + rng.randint(0, 2)] = rng.choice(ABSURD_VARINT)
    elif kind == "append":
        base += rng.randbytes(rng.randint(1, 64))
    elif kind == "body":
        del base[start:]
        base += rng.randbytes(rng.randint(0, 200))
    else:
        base = bytearray(rng.randbytes(rng.randint(0, 120)))
    return kind, bytes(base)


PROBE = encode_request(
    18, 0, PROBE_CORRELATION_ID, "probe", raw_wire.build(load_request_schema(18, 0))
)


async def read_until_probe(reader: asyncio.StreamReader) -> str:
    """Responses up to the probe's: 'answered', or 'closed' when the broker hangs up."""
    while True:
        try:
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            response = await reader.readexactly(size)
        except (asyncio.IncompleteReadError, ConnectionError):
            return "closed"
        (correlation_id,) = struct.unpack_from(">i", response, 0)
        if correlation_id == PROBE_CORRELATION_ID:
            return "answered"


async def run_worker(port: int, frames: list[tuple[str, bytes]], outcomes: Counter[str]) -> None:
    writer: asyncio.StreamWriter | None = None
    reader: asyncio.StreamReader | None = None
    for kind, frame in frames:
        if writer is None:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert reader is not None
        try:
            writer.write(struct.pack(">i", len(frame)) + frame + PROBE)
            await writer.drain()
            outcome = await asyncio.wait_for(read_until_probe(reader), PROBE_TIMEOUT_S)
        except (TimeoutError, ConnectionError):
            outcome = "waiting"
        outcomes[outcome] += 1
        outcomes[f"{kind}:{outcome}"] += 1
        if outcome != "answered":
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
            writer = reader = None
    if writer is not None:
        writer.close()


async def fuzz(port: int, frames: list[tuple[str, bytes]]) -> Counter[str]:
    outcomes: Counter[str] = Counter()
    shares = [frames[i::WORKERS] for i in range(WORKERS)]
    await asyncio.gather(*(run_worker(port, share, outcomes) for share in shares))
    return outcomes


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc status")


def run_and_check(broker: BrokerProcess, frames: list[tuple[str, bytes]]) -> Counter[str]:
    """Send the frames; the broker must be alive, bounded in memory and free of tracebacks."""
    assert broker.process is not None
    pid = broker.process.pid
    rss_before = rss_bytes(pid)
    started = time.monotonic()
    outcomes = asyncio.run(fuzz(broker.port, frames))
    elapsed_s = time.monotonic() - started

    assert broker.process.poll() is None, broker.output()
    rss_after = rss_bytes(pid)
    print(
        f"\n{len(frames)} frames in {elapsed_s:.1f}s; rss {rss_before >> 20} -> {rss_after >> 20}"
        f" MiB; outcomes {dict(sorted(outcomes.items()))}"
    )
    assert rss_after < RSS_LIMIT_BYTES
    assert outcomes["answered"] + outcomes["closed"] + outcomes["waiting"] == len(frames)
    log = broker.output_path.read_text(errors="replace")
    assert "Traceback" not in log, log[log.index("Traceback") - 2000 :][:6000]
    assert " ERROR " not in log
    return outcomes


def assert_round_trip(broker: BrokerProcess, topic: str, partition: int) -> None:
    """kafka-python produces (acks=all) and consumes back what it was acknowledged."""
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    sent = [
        producer.send(topic, key=b"after", value=b"fuzz-%d" % i, partition=partition).get(
            timeout=10
        )
        for i in range(20)
    ]
    producer.close()
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap, enable_auto_commit=False, consumer_timeout_ms=10_000
    )
    tp = TopicPartition(topic, partition)
    consumer.assign([tp])
    consumer.seek(tp, sent[0].offset)
    got = []
    for message in consumer:
        got.append((message.offset, message.value))
        if len(got) == len(sent):
            break
    consumer.close()
    assert got == [(meta.offset, b"fuzz-%d" % i) for i, meta in enumerate(sent)]


def test_malformed_frames_leave_the_broker_serving(broker: BrokerProcess) -> None:
    rng = random.Random(SEED)
    valid = corpus(broker.port)
    frames = [mutate(rng, valid) for _ in range(FRAMES)]
    outcomes = run_and_check(broker, frames)
    assert outcomes["closed"] > FRAMES // 4, "most malformed frames should close"
    assert outcomes["answered"] > 0, "some mutations stay valid and must be answered"
    # A real client still works, on a partition the fuzz has been writing to.
    assert_round_trip(broker, TOPIC, 1)


def test_every_served_api_survives_mutations(tmp_path: Path) -> None:
    """Every API and version the broker serves: one well-formed request each (every field set,
    then every nullable field null), then mutations of them. Admin requests may delete or
    reconfigure the fuzz topic; the round trip afterwards uses a topic created after the run."""
    registry = build_registry()
    valid = [
        encode_request(
            key,
            version,
            index,
            "fuzz",
            sample_message(load_request_schema(key, version), nulls=nulls, text=TOPIC),
        )[4:]
        for index, (key, version, nulls) in enumerate(
            (key, version, nulls)
            for key, handler in sorted(registry.items())
            for version in range(handler.min_version, handler.max_version + 1)
            for nulls in (False, True)
        )
    ]
    assert len(valid) > 100
    rng = random.Random(SEED + 1)
    frames = [("valid", frame) for frame in valid]
    frames += [mutate(rng, valid) for _ in range(EVERY_API_FRAMES)]
    with BrokerProcess(
        tmp_path,
        overrides={
            "socket.request.max.bytes": str(MAX_REQUEST_BYTES),
            "auto.create.topics.enable": "false",
        },
    ) as broker:
        raw_wire.create_topic(broker.port, TOPIC, partitions=2)
        outcomes = run_and_check(broker, frames)
        assert outcomes["valid:answered"] == len(valid), "a well-formed request went unanswered"
        raw_wire.create_topic(broker.port, "after-fuzz")
        assert_round_trip(broker, "after-fuzz", 0)
