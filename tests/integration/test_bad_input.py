"""A real broker process against bad input over raw sockets.

For each kind of bad input the broker either answers with the Kafka error a client expects,
or closes that one connection and logs exactly one warning line naming the client and the
reason. A connection opened before the bad one keeps working afterwards.
"""

from __future__ import annotations

import datetime
import random
import re
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from storage_core.records import SimpleRecord, build_batch
from tests.broker_process import BrokerProcess
from tests.integration import raw_wire
from tests.integration.raw_wire import api_versions, call, connect, is_closed_by_peer

MAX_REQUEST_BYTES = 65_536
FETCH_MAX_BYTES = 50_000
TOPIC = "events"
TOPIC_MAX_MESSAGE_BYTES = 2_000
WIDE_TOPIC = "wide"  # default max.message.bytes
PRODUCE_V = 9  # flexible
FETCH_V = 12  # by name, flexible
METADATA_VERSIONS = (1, 9, 12)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    directory: Path = tmp_path_factory.mktemp("bad-input")
    with BrokerProcess(
        directory,
        overrides={
            "socket.request.max.bytes": str(MAX_REQUEST_BYTES),
            "fetch.max.bytes": str(FETCH_MAX_BYTES),
            "auto.create.topics.enable": "false",
        },
    ) as process:
        raw_wire.create_topic(
            process.port, TOPIC, configs={"max.message.bytes": str(TOPIC_MAX_MESSAGE_BYTES)}
        )
        raw_wire.create_topic(process.port, WIDE_TOPIC)
        yield process


@pytest.fixture
def bystander(broker: BrokerProcess) -> Iterator[socket.socket]:
    """A connection opened before the bad input; it must still be served afterwards."""
    sock = connect(broker.port)
    assert api_versions(sock).error_code == ErrorCode.none
    yield sock
    assert api_versions(sock).error_code == ErrorCode.none, "the bystander connection broke"
    sock.close()


def full_output(broker: BrokerProcess) -> str:
    return broker.output_path.read_text(errors="replace")


def warning_lines(broker: BrokerProcess, sock: socket.socket) -> list[str]:
    client = f"client=127.0.0.1:{sock.getsockname()[1]} "
    return [
        line for line in full_output(broker).splitlines() if " WARNING " in line and client in line
    ]


def assert_closed_with_one_warning(broker: BrokerProcess, sock: socket.socket, reason: str) -> None:
    assert is_closed_by_peer(sock), "the broker kept the connection open"
    deadline = time.monotonic() + 5
    lines = warning_lines(broker, sock)
    while not lines and time.monotonic() < deadline:
        time.sleep(0.05)
        lines = warning_lines(broker, sock)
    assert len(lines) == 1, f"expected one warning line, got {lines}"
    assert "closing connection" in lines[0]
    assert re.search(reason, lines[0]), lines[0]
    assert "Traceback" not in full_output(broker)


def assert_no_warning(broker: BrokerProcess, sock: socket.socket) -> None:
    assert warning_lines(broker, sock) == []


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def now_ms() -> int:
    return int(time.time() * 1000)


# ---------------------------------------------------------------------------- framing
@pytest.mark.parametrize("seed", range(8))
def test_random_bytes_close_only_that_connection(
    broker: BrokerProcess, bystander: socket.socket, seed: int
) -> None:
    rng = random.Random(seed)
    sock = connect(broker.port)
    sock.sendall(rng.randbytes(rng.randint(1, 300)))
    sock.shutdown(socket.SHUT_WR)  # whatever size it claims, no more bytes will come
    assert_closed_with_one_warning(
        broker,
        sock,
        r"reason=(frame of -?\d+ bytes|the client closed it|unknown API|API key|cannot decode"
        r"|request of)",
    )


def test_truncated_frame_is_logged_when_the_client_goes_away(
    broker: BrokerProcess, bystander: socket.socket
) -> None:
    sock = connect(broker.port)
    sock.sendall(struct.pack(">i", 100) + b"0123456789")
    sock.shutdown(socket.SHUT_WR)
    assert_closed_with_one_warning(
        broker, sock, r"reason=the client closed it after 10 of 100 bytes of a frame"
    )


def test_truncated_size_prefix_is_logged(broker: BrokerProcess, bystander: socket.socket) -> None:
    sock = connect(broker.port)
    sock.sendall(b"\x00\x00")
    sock.shutdown(socket.SHUT_WR)
    assert_closed_with_one_warning(broker, sock, r"after 2 of 4 bytes of a frame")


def test_a_clean_close_between_frames_is_not_a_warning(
    broker: BrokerProcess, bystander: socket.socket
) -> None:
    sock = connect(broker.port)
    assert api_versions(sock).error_code == ErrorCode.none
    sock.shutdown(socket.SHUT_WR)
    assert is_closed_by_peer(sock)
    time.sleep(0.2)
    assert_no_warning(broker, sock)


@pytest.mark.parametrize("size", [0, -1, -(2**31), MAX_REQUEST_BYTES + 1, 2**31 - 1])
def test_frame_sizes_outside_the_limit_close_the_connection(
    broker: BrokerProcess, bystander: socket.socket, size: int
) -> None:
    sock = connect(broker.port)
    sock.sendall(struct.pack(">i", size) + b"\x00" * 16)
    assert_closed_with_one_warning(
        broker,
        sock,
        rf"reason=frame of {size} bytes is outside \(0, socket.request.max.bytes="
        rf"{MAX_REQUEST_BYTES}\]",
    )


def test_a_frame_of_exactly_the_limit_is_read(
    broker: BrokerProcess, bystander: socket.socket
) -> None:
    """The limit is inclusive: the frame is read, then refused for its content."""
    sock = connect(broker.port)
    padding = b"\x00" * (MAX_REQUEST_BYTES - 14)
    sock.sendall(frame(struct.pack(">hhih", 3, 1, 5, -1) + struct.pack(">i", 0) + padding))
    assert_closed_with_one_warning(broker, sock, r"leaves \d+ unread bytes")


# ---------------------------------------------------------------------------- API versions
def test_unknown_api_key_closes_the_connection(
    broker: BrokerProcess, bystander: socket.socket
) -> None:
    sock = connect(broker.port)
    sock.sendall(frame(struct.pack(">hhih", 9999, 0, 3, -1)))
    assert_closed_with_one_warning(broker, sock, r"reason=unknown API key 9999")


@pytest.mark.parametrize(("key", "version"), [(3, 99), (0, 0), (1, 3), (1, 17)])
def test_unsupported_version_of_a_known_api_closes_the_connection(
    broker: BrokerProcess, bystander: socket.socket, key: int, version: int
) -> None:
    sock = connect(broker.port)
    sock.sendall(frame(struct.pack(">hhih", key, version, 3, -1) + b"\x00" * 8))
    assert_closed_with_one_warning(
        broker, sock, rf"reason=API key {key} version {version} is not in \[\d+, \d+\]"
    )


def test_api_versions_from_the_future_is_answered_with_v0_and_the_api_list(
    broker: BrokerProcess, bystander: socket.socket
) -> None:
    """KIP-511: v0 response, UNSUPPORTED_VERSION, and the APIs so the client can pick."""
    sock = connect(broker.port)
    # A v99 body the broker cannot know: header v2 (flexible) + some tagged bytes.
    sock.sendall(frame(struct.pack(">hhih", 18, 99, 41, 3) + b"new" + b"\x00" + b"\x07" * 9))
    correlation_id, body = raw_wire.read_response(sock, 18, 0)
    assert correlation_id == 41
    assert body.error_code == ErrorCode.unsupported_version
    served = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
    assert {0, 1, 3, 18} <= served.keys()
    assert served[18][0] == 0 and served[18][1] >= 3
    # The client retries with a version the broker speaks, on the same connection.
    assert api_versions(sock).error_code == ErrorCode.none
    assert_no_warning(broker, sock)


# ---------------------------------------------------------------------------- metadata
@pytest.mark.parametrize("version", METADATA_VERSIONS)
def test_metadata_for_illegal_topic_names_is_invalid_topic(
    broker: BrokerProcess, bystander: socket.socket, version: int
) -> None:
    module = raw_wire.request_classes(3, version)
    names = ["bad/name", "..", "a" * 250, ".", "spaces are bad", TOPIC]
    topics = tuple(
        raw_wire.build(module.MetadataRequestTopic, name=name, topic_id=None) for name in names
    )
    with connect(broker.port) as sock:
        body = call(
            sock,
            3,
            version,
            topics=topics,
            allow_auto_topic_creation=True,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
        assert_no_warning(broker, sock)
    errors = {t.name: t.error_code for t in body.topics}
    assert errors == {
        **{name: ErrorCode.invalid_topic_exception for name in names[:-1]},
        TOPIC: ErrorCode.none,
    }
    assert not any(t.partitions for t in body.topics if t.name != TOPIC)


# ---------------------------------------------------------------------------- produce
def produce(
    broker: BrokerProcess, topic: str, records: bytes | None, *, acks: int = -1, partition: int = 0
) -> object:
    module = raw_wire.request_classes(0, PRODUCE_V)
    with connect(broker.port) as sock:
        body = call(
            sock,
            0,
            PRODUCE_V,
            transactional_id=None,
            acks=acks,
            timeout=datetime.timedelta(seconds=5),
            topic_data=(
                module.TopicProduceData(
                    name=topic,
                    partition_data=(module.PartitionProduceData(index=partition, records=records),),
                ),
            ),
        )
        assert_no_warning(broker, sock)
    (topic_response,) = body.responses
    (partition_response,) = topic_response.partition_responses
    return partition_response


def small_batch(value: bytes = b"value") -> bytes:
    return build_batch([SimpleRecord(key=b"key", value=value, timestamp=now_ms())])


def test_a_batch_with_a_bad_crc_is_corrupt_message(
    broker: BrokerProcess, bystander: socket.socket
) -> None:
    corrupt = bytearray(small_batch())
    corrupt[-1] ^= 0xFF  # in the CRC-covered records
    response = produce(broker, TOPIC, bytes(corrupt))
    assert response.error_code == ErrorCode.corrupt_message
    assert "crc" in (response.error_message or "").lower()
    assert response.base_offset == -1


@pytest.mark.parametrize(
    "records", [b"garbage", b"\x00" * 61, b"\xff" * 200], ids=["short", "zeros", "ones"]
)
def test_record_bytes_that_are_no_batch_are_refused(
    broker: BrokerProcess, bystander: socket.socket, records: bytes
) -> None:
    response = produce(broker, TOPIC, records)
    assert response.error_code in (ErrorCode.corrupt_message, ErrorCode.invalid_record)


def test_a_batch_above_max_message_bytes_is_message_too_large(
    broker: BrokerProcess, bystander: socket.socket
) -> None:
    response = produce(broker, TOPIC, small_batch(b"x" * (TOPIC_MAX_MESSAGE_BYTES + 1)))
    assert response.error_code == ErrorCode.message_too_large
    assert str(TOPIC_MAX_MESSAGE_BYTES) in (response.error_message or "")


@pytest.mark.parametrize(("topic", "partition"), [("no-such-topic", 0), (TOPIC, 7), (TOPIC, -1)])
def test_produce_to_an_unknown_partition_is_unknown_topic_or_partition(
    broker: BrokerProcess, bystander: socket.socket, topic: str, partition: int
) -> None:
    response = produce(broker, topic, small_batch(), partition=partition)
    assert response.error_code == ErrorCode.unknown_topic_or_partition


@pytest.mark.parametrize("acks", [2, -2, 3, 32767])
def test_invalid_acks_are_invalid_required_acks(
    broker: BrokerProcess, bystander: socket.socket, acks: int
) -> None:
    response = produce(broker, TOPIC, small_batch(), acks=acks)
    assert response.error_code == ErrorCode.invalid_required_acks


# ---------------------------------------------------------------------------- fetch
def fetch(broker: BrokerProcess, offset: int, topic: str = TOPIC, **overrides: object) -> object:
    module = raw_wire.request_classes(1, FETCH_V)
    partition_fields: dict[str, object] = {
        "partition": 0,
        "current_leader_epoch": -1,
        "fetch_offset": offset,
        "last_fetched_epoch": -1,
        "log_start_offset": -1,
        "partition_max_bytes": 1 << 20,
    }
    partition_fields.update(overrides.pop("partition_fields", {}))  # type: ignore[arg-type]
    request: dict[str, object] = {
        "max_wait": datetime.timedelta(milliseconds=100),
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": (
            module.FetchTopic(
                topic=topic, partitions=(raw_wire.build(module.FetchPartition, **partition_fields),)
            ),
        ),
        "forgotten_topics_data": (),
        "rack_id": "",
    }
    request.update(overrides)
    with connect(broker.port) as sock:
        body = call(sock, 1, FETCH_V, **request)
        assert_no_warning(broker, sock)
    return body.responses[0].partitions[0]


def test_fetch_beyond_the_log_end_is_offset_out_of_range(
    broker: BrokerProcess, bystander: socket.socket
) -> None:
    assert produce(broker, TOPIC, small_batch()).error_code == ErrorCode.none
    end = fetch(broker, 0).high_watermark
    assert end >= 1
    assert fetch(broker, end).error_code == ErrorCode.none  # the end itself is fine
    for offset in (end + 1, end + 1000, 2**63 - 1, -5):
        assert fetch(broker, offset).error_code == ErrorCode.offset_out_of_range, offset


# ---------------------------------------------------------------------------- malformed bodies
def test_absurd_array_count_closes_the_connection_without_allocating(
    broker: BrokerProcess, bystander: socket.socket
) -> None:
    """A Metadata v12 whose topic array claims 2**32 - 2 elements: kio would reserve 32 GiB
    and abort the process; the bounds walk refuses it first."""
    sock = connect(broker.port)
    sock.sendall(frame(struct.pack(">hhih", 3, 12, 5, 1) + b"x\x00" + b"\xff\xff\xff\xff\x0f"))
    assert_closed_with_one_warning(broker, sock, r"array of 4294967294 elements")


def test_a_body_with_trailing_bytes_closes_the_connection(
    broker: BrokerProcess, bystander: socket.socket
) -> None:
    request = raw_wire.request_bytes(
        3, 1, topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )
    sock = connect(broker.port)
    sock.sendall(frame(request[4:] + b"extra"))
    assert_closed_with_one_warning(broker, sock, r"leaves 5 unread bytes")


# ---------------------------------------------------------------------------- found by the fuzz
def test_fetch_versions_before_current_leader_epoch_are_served(
    broker: BrokerProcess, bystander: socket.socket
) -> None:
    """Fetch v4-v8 have no current_leader_epoch; the handler used to fail on every one."""
    assert produce(broker, TOPIC, small_batch(b"legacy")).error_code == ErrorCode.none
    for version in (4, 8):
        module = raw_wire.request_classes(1, version)
        with connect(broker.port) as sock:
            body = call(
                sock,
                1,
                version,
                replica_id=-1,
                max_wait=datetime.timedelta(milliseconds=10),
                min_bytes=1,
                max_bytes=1 << 20,
                isolation_level=0,
                session_id=0,
                session_epoch=-1,
                topics=(
                    raw_wire.build(
                        module.FetchTopic,
                        topic=TOPIC,
                        partitions=(
                            raw_wire.build(
                                module.FetchPartition,
                                partition=0,
                                fetch_offset=0,
                                log_start_offset=-1,
                                partition_max_bytes=1 << 20,
                            ),
                        ),
                    ),
                ),
                forgotten_topics_data=(),
            )
            assert_no_warning(broker, sock)
        (partition,) = body.responses[0].partitions
        assert partition.error_code == ErrorCode.none, version
        assert partition.records and b"legacy" in partition.records


def list_offsets(broker: BrokerProcess, version: int, timestamp: int) -> object:
    module = raw_wire.request_classes(2, version)
    with connect(broker.port) as sock:
        body = call(
            sock,
            2,
            version,
            replica_id=-1,
            isolation_level=0,
            topics=(
                module.ListOffsetsTopic(
                    name=TOPIC,
                    partitions=(
                        raw_wire.build(
                            module.ListOffsetsPartition,
                            partition_index=0,
                            current_leader_epoch=-1,
                            timestamp=timestamp,
                        ),
                    ),
                ),
            ),
        )
        assert_no_warning(broker, sock)
    return body.topics[0].partitions[0]


def test_list_offsets_versions_before_current_leader_epoch_are_served(
    broker: BrokerProcess, bystander: socket.socket
) -> None:
    """ListOffsets v1-v3 have no current_leader_epoch; the handler used to fail on them."""
    latest = list_offsets(broker, 4, -1)
    for version in (1, 3):
        answer = list_offsets(broker, version, -1)
        assert answer.error_code == ErrorCode.none, version
        assert answer.offset == latest.offset


@pytest.mark.parametrize("timestamp", [-6, -7, -(2**63)])
def test_list_offsets_with_an_unknown_negative_timestamp_is_invalid_request(
    broker: BrokerProcess, bystander: socket.socket, timestamp: int
) -> None:
    answer = list_offsets(broker, 7, timestamp)
    assert answer.error_code == ErrorCode.invalid_request
    assert answer.offset == -1


@pytest.mark.parametrize("version", [10, 11])
def test_metadata_by_topic_id_before_v12_is_invalid_request(
    broker: BrokerProcess, bystander: socket.socket, version: int
) -> None:
    """v10-v11 allow a null name in the request but not in the response (lookups by id came
    with v12); the response used to fail encoding and the connection was dropped."""
    module = raw_wire.request_classes(3, version)
    with connect(broker.port) as sock:
        body = call(
            sock,
            3,
            version,
            topics=(
                module.MetadataRequestTopic(name=None, topic_id=None),
                module.MetadataRequestTopic(name=TOPIC, topic_id=None),
            ),
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
        assert_no_warning(broker, sock)
    assert [(t.name, t.error_code) for t in body.topics] == [
        ("", ErrorCode.invalid_request),
        (TOPIC, ErrorCode.none),
    ]


def test_a_huge_fetch_max_bytes_is_capped_by_the_broker_fetch_max_bytes(
    broker: BrokerProcess, bystander: socket.socket
) -> None:
    """A client asking for 2 GiB used to get a response of the whole log, built in memory
    (a 200 MB log took the broker from 44 MiB to 630 MiB); Kafka caps it at fetch.max.bytes."""
    batch_bytes = len(small_batch(b"w" * 5_000))
    for _ in range(3 * FETCH_MAX_BYTES // batch_bytes):
        assert produce(broker, WIDE_TOPIC, small_batch(b"w" * 5_000)).error_code == ErrorCode.none
    answer = fetch(
        broker,
        0,
        WIDE_TOPIC,
        max_bytes=2**31 - 1,
        partition_fields={"partition_max_bytes": 2**31 - 1},
    )
    assert answer.error_code == ErrorCode.none
    assert FETCH_MAX_BYTES - batch_bytes < len(answer.records) <= FETCH_MAX_BYTES
    assert answer.high_watermark * batch_bytes > 2 * FETCH_MAX_BYTES
