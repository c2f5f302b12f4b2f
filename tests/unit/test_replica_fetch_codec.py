"""The hand-written replica Fetch v12 codec against kio's, field by field, and against the
broker's own Fetch response encoder (the follower's real peer)."""

from __future__ import annotations

import datetime
import io

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as kio_request
from kio.schema.fetch.v12 import response as kio_response
from kio.schema.types import BrokerId, ProducerId, TopicName
from kio.serial import entity_writer
from kio.static.primitive import i8, i32, i32Timedelta, i64

from storage_core.client.errors import ProtocolMismatchError
from storage_core.client.replica_fetch_codec import (
    FetchedPartition,
    PartitionFetch,
    decode_fetch_response,
    encode_fetch_request,
)
from storage_core.server.fetch_response import (
    FetchPartitionResponse,
    FetchTopicResponse,
    encode_fetch_response,
)

int32s = st.integers(-(2**31), 2**31 - 1)
int64s = st.integers(-(2**63), 2**63 - 1)
topics = st.text(min_size=1, max_size=20)
error_codes = st.sampled_from(
    [ErrorCode.none, ErrorCode.offset_out_of_range, ErrorCode.fenced_leader_epoch]
)


def kio_bytes(entity: object) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


partition_fetches = st.builds(
    PartitionFetch,
    topic=st.sampled_from(["events", "t", "ünïcode"]),
    partition=int32s,
    current_leader_epoch=int32s,
    fetch_offset=int64s,
    last_fetched_epoch=int32s,
    log_start_offset=int64s,
    partition_max_bytes=int32s,
)


@given(
    partitions=st.lists(partition_fetches, max_size=6),
    replica_id=int32s,
    max_wait_ms=st.integers(0, 2**31 - 1),
    min_bytes=int32s,
    max_bytes=int32s,
)
def test_the_request_is_byte_for_byte_kios(
    partitions: list[PartitionFetch],
    replica_id: int,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
) -> None:
    by_topic: dict[str, list[kio_request.FetchPartition]] = {}
    for p in partitions:
        by_topic.setdefault(p.topic, []).append(
            kio_request.FetchPartition(
                partition=i32(p.partition),
                current_leader_epoch=i32(p.current_leader_epoch),
                fetch_offset=i64(p.fetch_offset),
                last_fetched_epoch=i32(p.last_fetched_epoch),
                log_start_offset=i64(p.log_start_offset),
                partition_max_bytes=i32(p.partition_max_bytes),
            )
        )
    expected = kio_request.FetchRequest(
        replica_id=BrokerId(replica_id),
        max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=max_wait_ms)),
        min_bytes=i32(min_bytes),
        max_bytes=i32(max_bytes),
        isolation_level=i8(0),
        session_id=i32(0),
        session_epoch=i32(-1),
        topics=tuple(
            kio_request.FetchTopic(topic=TopicName(t), partitions=tuple(ps))
            for t, ps in by_topic.items()
        ),
        forgotten_topics_data=(),
        rack_id="",
    )
    encoded = encode_fetch_request(
        replica_id=replica_id,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        partitions=partitions,
    )
    assert encoded == kio_bytes(expected)


kio_partitions = st.builds(
    kio_response.PartitionData,
    partition_index=int32s.map(i32),
    error_code=error_codes,
    high_watermark=int64s.map(i64),
    last_stable_offset=int64s.map(i64),
    log_start_offset=int64s.map(i64),
    diverging_epoch=st.builds(
        kio_response.EpochEndOffset, epoch=int32s.map(i32), end_offset=int64s.map(i64)
    ),
    current_leader=st.builds(
        kio_response.LeaderIdAndEpoch,
        leader_id=int32s.map(BrokerId),
        leader_epoch=int32s.map(i32),
    ),
    snapshot_id=st.builds(
        kio_response.SnapshotId, end_offset=int64s.map(i64), epoch=int32s.map(i32)
    ),
    aborted_transactions=st.none()
    | st.lists(
        st.builds(
            kio_response.AbortedTransaction,
            producer_id=int64s.map(ProducerId),
            first_offset=int64s.map(i64),
        ),
        max_size=3,
    ).map(tuple),
    preferred_read_replica=int32s.map(BrokerId),
    records=st.none() | st.binary(max_size=300),
)


@given(
    error_code=error_codes,
    responses=st.lists(st.tuples(topics, st.lists(kio_partitions, max_size=4)), max_size=3),
)
def test_the_response_decodes_as_kio_encodes_it(
    error_code: ErrorCode, responses: list[tuple[str, list[kio_response.PartitionData]]]
) -> None:
    response = kio_response.FetchResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(milliseconds=3)),
        error_code=error_code,
        session_id=i32(0),
        responses=tuple(
            kio_response.FetchableTopicResponse(topic=TopicName(t), partitions=tuple(ps))
            for t, ps in responses
        ),
    )
    decoded_error, decoded = decode_fetch_response(kio_bytes(response))
    assert decoded_error == error_code
    assert decoded == [
        FetchedPartition(
            topic=t,
            partition=p.partition_index,
            error_code=p.error_code,
            high_watermark=p.high_watermark,
            log_start_offset=p.log_start_offset,
            records=None if p.records is None else bytes(p.records),
            # kio leaves a field at its default out of the tags
            diverging_epoch=None
            if (p.diverging_epoch.epoch, p.diverging_epoch.end_offset) == (-1, -1)
            else (p.diverging_epoch.epoch, p.diverging_epoch.end_offset),
        )
        for t, ps in responses
        for p in ps
    ]


def _broker_response(diverging: tuple[int, int] | None, records: bytes) -> bytes:
    """A v12 response body as the leader's Fetch handler encodes it."""
    parts = encode_fetch_response(
        version=12,
        correlation_id=9,
        topics=[
            FetchTopicResponse(
                topic="events",
                topic_id=bytes(16),
                partitions=(
                    FetchPartitionResponse(
                        partition_index=2,
                        error_code=0,
                        high_watermark=40,
                        last_stable_offset=40,
                        log_start_offset=5,
                        diverging_epoch=diverging,
                        aborted_transactions=(),
                        records=records,
                    ),
                ),
            )
        ],
    )
    frame = parts.to_bytes()
    return frame[4 + 4 + 1 :]  # size, correlation id, the response header's tags


def test_the_brokers_own_answer_decodes() -> None:
    assert decode_fetch_response(_broker_response(None, b"batch")) == (
        0,
        [FetchedPartition("events", 2, 0, 40, 5, b"batch", None)],
    )
    assert decode_fetch_response(_broker_response((3, 17), b""))[1][0].diverging_epoch == (3, 17)


def test_unknown_tags_are_skipped() -> None:
    body = _broker_response(None, b"batch")
    with_tag = body[:-1] + b"\x01\x07\x02\xab\xcd"  # top-level section: one tag 7 of 2 bytes
    assert decode_fetch_response(with_tag) == decode_fetch_response(body)


def test_a_cut_or_padded_response_is_refused() -> None:
    body = _broker_response((3, 17), b"records!")
    for size in range(len(body)):
        with pytest.raises(ProtocolMismatchError, match="Fetch v12 response"):
            decode_fetch_response(body[:size])
    with pytest.raises(ProtocolMismatchError, match="1 trailing bytes"):
        decode_fetch_response(body + b"\x00")


def test_a_view_of_the_body_decodes_to_views_of_it() -> None:
    """The follower decodes the bytes it received in place: records are not copied."""
    body = bytearray(_broker_response(None, b"batch"))
    _error, [partition] = decode_fetch_response(memoryview(body))
    assert isinstance(partition.records, memoryview)
    assert partition.records.obj is body
    assert bytes(partition.records) == b"batch"
