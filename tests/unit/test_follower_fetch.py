"""A follower's one-partition Fetch, decoded by hand and answered without the generic codec:
it decodes exactly what kio decodes, it passes everything else to the general handler, and
its answer is the general handler's, byte for byte, for data inline or in a file region,
errors and a diverging epoch."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import struct
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from storage_core.client.replica_fetch_codec import PartitionFetch, encode_fetch_request
from storage_core.common import TopicPartition, Uuid
from storage_core.log.log_config import LogConfig
from storage_core.log.log_manager import LogManager
from storage_core.replication.delayed_fetch import FetchRequestPartition
from storage_core.replication.partition import Partition
from storage_core.replication.replica_manager import ReplicaManager
from storage_core.server.handlers import build_registry, fetch, follower_fetch
from storage_core.server.kafka_config import KafkaConfig
from storage_core.server.protocol import MalformedRequestError, parse_request
from storage_core.server.request_context import RequestContext
from storage_core.server.socket_server import SocketServer
from storage_core.server.socket_server_config import SocketServerConfig
from tests.conftest import make_batch

int32s = st.integers(-(2**31), 2**31 - 1)
int64s = st.integers(-(2**63), 2**63 - 1)
TP = TopicPartition("events", 0)
LEADER, FOLLOWER = 0, 1


def frame_of(
    *partitions: PartitionFetch,
    replica_id: int = FOLLOWER,
    version: int = 12,
    client_id: bytes | None = b"broker-1-fetcher-0",
    session_id: int = 0,
    session_epoch: int = -1,
    max_wait_ms: int = 500,
    min_bytes: int = 1,
    max_bytes: int = 10 << 20,
    header_tags: bytes = b"\x00",
) -> bytes:
    """A Fetch frame (size prefix excluded) as a follower's ``ReplicaFetcherThread`` sends."""
    body = encode_fetch_request(
        replica_id=replica_id,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=session_id,
        session_epoch=session_epoch,
        partitions=partitions,
    )
    client = struct.pack(">h", -1) if client_id is None else struct.pack(">h", len(client_id))
    header = struct.pack(">hhi", 1, version, 77) + client + (client_id or b"") + header_tags
    return header + body


def partition_fetch(**fields: Any) -> PartitionFetch:
    defaults: dict[str, Any] = dict(
        topic=TP.topic,
        partition=TP.partition,
        current_leader_epoch=5,
        fetch_offset=0,
        last_fetched_epoch=-1,
        log_start_offset=0,
        partition_max_bytes=1 << 20,
    )
    return PartitionFetch(**(defaults | fields))


@given(
    partition=st.builds(
        PartitionFetch,
        topic=st.text(min_size=1, max_size=300),
        partition=int32s,
        current_leader_epoch=int32s,
        fetch_offset=int64s,
        last_fetched_epoch=int32s,
        log_start_offset=int64s,
        partition_max_bytes=int32s,
    ),
    replica_id=st.integers(0, 2**31 - 1),
    max_wait_ms=int32s,
    min_bytes=int32s,
    max_bytes=int32s,
    client_id=st.none() | st.binary(max_size=40).map(lambda b: b.hex().encode()),
    session_id=int32s,
    session_epoch=int32s,
)
def test_it_decodes_what_kio_decodes(
    partition: PartitionFetch,
    replica_id: int,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    client_id: bytes | None,
    session_id: int,
    session_epoch: int,
) -> None:
    frame = frame_of(
        partition,
        session_id=session_id,
        session_epoch=session_epoch,
        replica_id=replica_id,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        client_id=client_id,
    )
    decoded = follower_fetch.decode(frame)
    header, request = parse_request(frame)
    assert decoded is not None
    (topic,) = request.topics
    (p,) = topic.partitions
    assert decoded == follower_fetch.FollowerFetch(
        correlation_id=header.correlation_id,
        replica_id=int(request.replica_id),
        max_wait_ms=request.max_wait // datetime.timedelta(milliseconds=1),
        min_bytes=int(request.min_bytes),
        max_bytes=int(request.max_bytes),
        partition=PartitionFetch(
            topic=topic.topic,
            partition=int(p.partition),
            current_leader_epoch=int(p.current_leader_epoch),
            fetch_offset=int(p.fetch_offset),
            last_fetched_epoch=int(p.last_fetched_epoch),
            log_start_offset=int(p.log_start_offset),
            partition_max_bytes=int(p.partition_max_bytes),
        ),
        session_id=int(request.session_id),
        session_epoch=int(request.session_epoch),
    )
    assert decoded.partition == partition  # what the follower encoded


def test_an_incremental_fetch_without_partitions_is_decoded_as_kio_does() -> None:
    frame = frame_of(session_id=123, session_epoch=7)
    decoded = follower_fetch.decode(frame)
    _header, request = parse_request(frame)
    assert request.topics == () and request.session_epoch == 7
    assert decoded is not None
    assert (decoded.partition, decoded.session_id, decoded.session_epoch) == (None, 123, 7)


def test_every_other_fetch_goes_to_the_general_handler() -> None:
    one = partition_fetch()
    assert follower_fetch.decode(frame_of(one)) is not None
    assert follower_fetch.decode(frame_of(one, session_id=9, session_epoch=1)) is not None
    assert follower_fetch.decode(frame_of()) is not None
    others = {
        "a consumer": frame_of(one, replica_id=-1),
        "two partitions": frame_of(one, partition_fetch(partition=1)),
        "two topics": frame_of(one, partition_fetch(topic="other")),
        # forgotten_topics_data of one topic "t" and its partition 0
        "forgotten topics": frame_of(one)[:-3] + b"\x02\x02t\x02\x00\x00\x00\x00\x00\x01\x00",
        "another version": frame_of(one, version=11),
        "header tags": frame_of(one, header_tags=b"\x01\x00\x00"),
        "a trailing byte": frame_of(one) + b"\x00",
        "body tags": frame_of(one)[:-1] + b"\x01\x00\x00",
        "a rack id then a byte": frame_of(one)[:-2] + b"\x02a\x00\x00",
    }
    for what, frame in others.items():
        assert follower_fetch.decode(frame) is None, what


def test_a_rack_id_is_read_and_ignored_as_the_general_handler_does() -> None:
    frame = frame_of(partition_fetch())[:-2] + b"\x03r1\x00"  # rack_id "r1", no tags
    decoded = follower_fetch.decode(frame)
    assert decoded is not None and decoded.partition.topic == TP.topic
    parse_request(frame)  # the codec agrees that this is a whole request


def test_a_truncated_or_mangled_frame_is_left_to_the_general_handler() -> None:
    frame = frame_of(partition_fetch())
    for end in range(len(frame)):
        assert follower_fetch.decode(frame[:end]) is None, end
    bad_utf8 = frame.replace(TP.topic.encode(), b"\xff" * len(TP.topic))
    assert follower_fetch.decode(bad_utf8) is None


def _leader(tmp_path: Path) -> ReplicaManager:
    logs = LogManager([tmp_path / "logs"], LogConfig())
    logs.startup(background_tasks=False)
    replicas = ReplicaManager(logs, local_broker_id=LEADER)
    log = logs.get_or_create_log(TP, topic_id=Uuid.random())
    partition = Partition(
        TP,
        log.topic_id or Uuid.random(),
        log,
        local_broker_id=LEADER,
        on_high_watermark_advanced=replicas.on_high_watermark_advanced,
    )
    partition.make_leader(leader_epoch=5, replicas=(LEADER, FOLLOWER), isr=(LEADER, FOLLOWER))
    replicas.add_partition(partition)
    return replicas


def test_its_answer_is_the_general_handlers_byte_for_byte(tmp_path: Path) -> None:
    """The same fetches answered both ways, after a first fetch that settles the follower's
    state (a fetch moves the HW, which the next answer carries)."""
    replicas = _leader(tmp_path)
    broker = SimpleNamespace(
        replica_manager=replicas,
        config=KafkaConfig.from_props({"log.dirs": str(tmp_path / "logs")}),
        authorizer=None,
    )
    cases = {
        "records inline": partition_fetch(fetch_offset=0),
        "a file region": partition_fetch(fetch_offset=3),
        "at the log end": partition_fetch(fetch_offset=13),
        "a diverging epoch": partition_fetch(fetch_offset=13, last_fetched_epoch=4),
        "a fenced epoch": partition_fetch(current_leader_epoch=4),
        "an unknown partition": partition_fetch(partition=7),
        "out of range": partition_fetch(fetch_offset=99),
    }

    async def answer_both_ways(frame: bytes) -> tuple[bytes, bytes]:
        fast = follower_fetch.decode(frame)
        assert fast is not None
        header, request = parse_request(frame)
        ctx = RequestContext(
            api_key=1,
            api_version=12,
            correlation_id=header.correlation_id,
            client_id=header.client_id,
            client_host="127.0.0.1",
            services=broker,  # type: ignore[arg-type]
        )
        general = await fetch.handle(ctx, request)
        answered = await follower_fetch.handle(broker, fast)  # type: ignore[arg-type]
        try:
            return general.to_bytes(), answered.to_bytes()
        finally:
            general.close()
            answered.close()

    async def run() -> None:
        replicas.bind_loop(asyncio.get_running_loop())
        await replicas.append_records({TP: make_batch(3)}, required_acks=1, timeout_ms=1000)
        big = make_batch(10, value_size=10_000)  # past the size sent from its file
        await replicas.append_records({TP: big}, required_acks=1, timeout_ms=1000)
        settle = FetchRequestPartition(fetch_offset=13, max_bytes=1 << 20, current_leader_epoch=5)
        await replicas.fetch_messages(
            {TP: settle}, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, replica_id=FOLLOWER
        )
        for what, partition in cases.items():
            general, fast = await answer_both_ways(frame_of(partition, max_wait_ms=0))
            assert fast == general, what
        # The region case really went out as a region, the inline one as bytes.
        region = follower_fetch.decode(frame_of(cases["a file region"], max_wait_ms=0))
        assert region is not None
        answered = await follower_fetch.handle(broker, region)  # type: ignore[arg-type]
        assert answered.has_regions
        answered.close()

    asyncio.run(run())
    replicas.shutdown()


def general_decision(frame: bytes) -> follower_fetch.FollowerFetch | None:
    """What the general decoder reads from ``frame`` in the fast path's terms, or None when it
    refuses the frame."""
    try:
        header, request = parse_request(frame)
    except MalformedRequestError:
        return None
    partition = None
    if request.topics:
        (topic,) = request.topics
        (p,) = topic.partitions
        partition = PartitionFetch(
            topic=topic.topic,
            partition=int(p.partition),
            current_leader_epoch=int(p.current_leader_epoch),
            fetch_offset=int(p.fetch_offset),
            last_fetched_epoch=int(p.last_fetched_epoch),
            log_start_offset=int(p.log_start_offset),
            partition_max_bytes=int(p.partition_max_bytes),
        )
    return follower_fetch.FollowerFetch(
        correlation_id=header.correlation_id,
        replica_id=int(request.replica_id),
        max_wait_ms=request.max_wait // datetime.timedelta(milliseconds=1),
        min_bytes=int(request.min_bytes),
        max_bytes=int(request.max_bytes),
        partition=partition,
        session_id=int(request.session_id),
        session_epoch=int(request.session_epoch),
    )


def agrees_with_the_general_decoder(frame: bytes) -> None:
    fast = follower_fetch.decode(frame)
    if fast is not None:
        assert fast == general_decision(frame), frame.hex()


def mutate(frame: bytes, edits: list[tuple[str, int, bytes]]) -> bytes:
    out = bytearray(frame)
    for kind, where, data in edits:
        position = where % (len(out) + 1)
        if kind == "set":
            out[position : position + len(data)] = data
        elif kind == "insert":
            out[position:position] = data
        elif kind == "delete":
            del out[position : position + max(len(data), 1)]
        else:
            del out[position:]
    return bytes(out)


# Bytes that make the interesting cases likely: lengths of -1 and below, non-UTF-8 bytes,
# varints of a null or of an empty string, tag counts.
interesting_bytes = st.sampled_from(
    [b"\xff", b"\xff\xfe", b"\x80", b"\xc3", b"\xed\xa0\x80", b"\x00", b"\x01", b"\x02", b"\x7f"]
) | st.binary(min_size=1, max_size=4)


@settings(max_examples=1_000)
@given(
    client_id=st.none() | st.binary(max_size=8),
    rack_id=st.binary(max_size=6),
    topic=st.text(min_size=1, max_size=8),
    edits=st.lists(
        st.tuples(
            st.sampled_from(["set", "set", "insert", "delete", "truncate"]),
            st.integers(0, 200),
            interesting_bytes,
        ),
        max_size=3,
    ),
)
def test_a_mutated_frame_is_left_to_the_general_decoder_or_read_the_same(
    client_id: bytes | None, rack_id: bytes, topic: str, edits: list[tuple[str, int, bytes]]
) -> None:
    """For any frame the fast path either answers None (the general handler decides) or reads
    what the general decoder reads: a client id length below -1, a client or rack id that is
    not UTF-8 and a null rack id were read here and refused there."""
    base = frame_of(partition_fetch(topic=topic), client_id=client_id)
    with_rack = base[:-2] + bytes((len(rack_id) + 1,)) + rack_id + b"\x00"
    agrees_with_the_general_decoder(mutate(with_rack, edits))


def test_frames_the_general_decoder_refuses_are_not_read_here() -> None:
    frame = frame_of(partition_fetch(), client_id=b"ab")
    refused = {
        "a client id length of -2": frame[:8] + struct.pack(">h", -2) + frame[12:],
        "a client id that is not UTF-8": frame[:10] + b"\xff\xfe" + frame[12:],
        "a null rack id": frame[:-2] + b"\x00\x00",
        "a rack id that is not UTF-8": frame[:-2] + b"\x02\xff\x00",
    }
    for what, bad in refused.items():
        assert general_decision(bad) is None, what
        assert follower_fetch.decode(bad) is None, what


def test_the_socket_server_serves_it_through_the_fetch_handlers_fast_path(
    tmp_path: Path,
) -> None:
    """The listener names no API: a follower's fetch goes the fast path the registry gives
    Fetch, never the general handler (here one that fails, closing the connection, as a
    consumer's fetch shows)."""
    replicas = _leader(tmp_path)
    services = SimpleNamespace(
        replica_manager=replicas,
        config=KafkaConfig.from_props({"log.dirs": str(tmp_path / "logs")}),
        authorizer=None,
    )

    async def general_fails(ctx: RequestContext, request: Any) -> Any:
        raise RuntimeError("the general Fetch handler was called")

    registry = build_registry()
    assert registry[1].fast_path is not None
    registry[1] = dataclasses.replace(registry[1], handle=general_fails)
    config = SocketServerConfig(
        max_request_bytes=1 << 20,
        max_connections=10,
        max_connections_per_ip=10,
        connections_max_idle_ms=600_000,
        queued_max_request_bytes=1 << 21,
    )

    async def exchange(port: int, frame: bytes) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(struct.pack(">i", len(frame)) + frame)
        await writer.drain()
        try:
            size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 5))[0]
            return await asyncio.wait_for(reader.readexactly(size), 5)
        except asyncio.IncompleteReadError:
            return b""  # closed without an answer
        finally:
            writer.close()

    async def run() -> tuple[bytes, bytes]:
        replicas.bind_loop(asyncio.get_running_loop())
        await replicas.append_records({TP: make_batch(3)}, required_acks=1, timeout_ms=1000)
        server = SocketServer(services, registry, config=config)  # type: ignore[arg-type]
        port = await server.start("127.0.0.1", 0)
        try:
            follower = await exchange(port, frame_of(partition_fetch(), max_wait_ms=0))
            consumer = await exchange(
                port, frame_of(partition_fetch(), replica_id=-1, max_wait_ms=0)
            )
        finally:
            await server.stop()
        return follower, consumer

    follower, consumer = asyncio.run(run())
    replicas.shutdown()
    assert struct.unpack_from(">i", follower)[0] == 77  # the request's correlation id
    assert len(follower) > 4 + 3 * 60  # with the three records
    assert consumer == b""
