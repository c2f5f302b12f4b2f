"""A lean Kafka client for benchmarks: pre-encoded requests over one raw socket.

It measures the broker rather than a client library: nothing is built per record, and the
records are never decoded into Python objects.

Produce (v9): one request frame is encoded once per batch (``encode_request``, kio) and sent
again and again, only the correlation id changing; up to ``in_flight`` requests are
outstanding, as ``max.in.flight.requests.per.connection`` allows. Every response is decoded
with kio and must carry the expected correlation id and error code 0.

    frame    = size int32 | api_key int16 | api_version int16 | correlation_id int32 | rest
    sent as  [size, key, version, correlation id] + rest   (one sendmsg, rest never copied)

Fetch (v11, not flexible): one request at a time from the next offset, the response read into
one reusable buffer, its header parsed by hand (layout below) and its record batches walked by
their headers only (base offset int64, batch length int32, magic int8 at +16, last offset
delta int32 at +23): each must be magic 2, fit the record set and follow the previous one
without a gap.

    correlation_id int32 | throttle_time_ms int32 | error_code int16 | session_id int32
    responses int32 | topic int16 len + bytes | partitions int32
      partition_index int32 | error_code int16 | high_watermark int64
      last_stable_offset int64 | log_start_offset int64
      aborted_transactions int32 (-1 null), 16 bytes each | preferred_read_replica int32
      records int32 len (-1 null) + bytes
"""

from __future__ import annotations

import datetime
import socket
import struct
import sys
from dataclasses import dataclass
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader
from kio.serial.readers import read_unsigned_varint

from storage_core.protocol.messages import build
from storage_core.server.protocol import encode_request

PRODUCE_KEY = 0
PRODUCE_VERSION = 9
FETCH_KEY = 1
FETCH_VERSION = 11
SOCKET_TIMEOUT_S = 120.0
SOCKET_BUFFER_BYTES = 4 * 1024 * 1024

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_FETCH_TOP = struct.Struct(">iihii")  # correlation, throttle, error, session, topic count
_FETCH_PARTITION = struct.Struct(">ihqqq")  # index, error, hw, lso, log start
_BATCH_HEAD = struct.Struct(">qi")  # base offset, batch length
_LAST_OFFSET_DELTA = struct.Struct(">i")


class LeanClientError(Exception):
    """The broker answered something the benchmark did not expect (an error, a gap)."""


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=SOCKET_TIMEOUT_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER_BYTES)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER_BYTES)
    return sock


def recv_into_exactly(sock: socket.socket, view: memoryview) -> None:
    received = 0
    size = len(view)
    while received < size:
        n = sock.recv_into(view[received:], size - received)
        if n == 0:
            raise ConnectionError(f"connection closed after {received} of {size} bytes")
        received += n


def read_frame(sock: socket.socket, buffer: bytearray) -> memoryview:
    """The next response frame (without its size field), in ``buffer`` (grown if needed)."""
    head = bytearray(4)
    recv_into_exactly(sock, memoryview(head))
    (size,) = _I32.unpack(head)
    if size > len(buffer):
        buffer.extend(bytes(size - len(buffer)))
    view = memoryview(buffer)[:size]
    recv_into_exactly(sock, view)
    return view


# ---------------------------------------------------------------------- produce
@dataclass(frozen=True, slots=True)
class ProduceFrame:
    """A Produce request of one batch, ready to be sent under any correlation id."""

    head: bytes  # size, api key, api version (8 bytes)
    rest: bytes  # client id onwards


def produce_frame(topic: str, batch: bytes, *, acks: int, timeout_ms: int = 30_000) -> ProduceFrame:
    module = _request_module(PRODUCE_KEY, PRODUCE_VERSION)
    body = build(
        module.ProduceRequest,
        transactional_id=None,
        acks=acks,
        timeout=datetime.timedelta(milliseconds=timeout_ms),
        topic_data=(
            module.TopicProduceData(
                name=topic, partition_data=(module.PartitionProduceData(index=0, records=batch),)
            ),
        ),
    )
    frame = encode_request(PRODUCE_KEY, PRODUCE_VERSION, 0, "lean-bench", body)
    return ProduceFrame(head=frame[:8], rest=frame[12:])


def produce(port: int, frame: ProduceFrame, count: int, *, in_flight: int) -> None:
    """Send ``frame`` ``count`` times with up to ``in_flight`` requests outstanding; every
    response must answer its request in order with no error."""
    reader = entity_reader(load_response_schema(PRODUCE_KEY, PRODUCE_VERSION))
    buffer = bytearray(4096)
    with connect(port) as sock:
        sent = answered = 0
        while answered < count:
            while sent < count and sent - answered < in_flight:
                _send(sock, [frame.head + _I32.pack(sent), frame.rest])
                sent += 1
            view = read_frame(sock, buffer)
            (correlation_id,) = _I32.unpack_from(view, 0)
            if correlation_id != answered:
                raise LeanClientError(f"response {correlation_id} answers request {answered}")
            readonly = view.toreadonly()
            _tags, used = read_unsigned_varint(readonly, 4)
            body, _ = reader(readonly, 4 + used)
            for topic in body.responses:
                for partition in topic.partition_responses:
                    if partition.error_code != 0:
                        raise LeanClientError(
                            f"produce failed: {partition.error_code!r} {partition.error_message}"
                        )
            answered += 1


def _send(sock: socket.socket, parts: list[bytes]) -> None:
    total = sum(len(p) for p in parts)
    sent = sock.sendmsg(parts)
    if sent < total:  # a blocking socket only stops short on a signal; finish by hand
        sock.sendall(b"".join(parts)[sent:])


# ---------------------------------------------------------------------- fetch
@dataclass(frozen=True, slots=True, kw_only=True)
class FetchTotals:
    records: int
    batches: int
    record_set_bytes: int  # whole batches only: the log's bytes, each counted once
    response_bytes: int  # every byte received, partial batches repeated included


def fetch_buffer(max_bytes: int) -> bytearray:
    """A receive buffer for responses of up to ``max_bytes`` of records (its pages touched:
    a consumer reuses its buffers, so page faults are no part of a fetch)."""
    return bytearray(max_bytes + 1024 * 1024)


def fetch(
    port: int, topic: str, total_records: int, *, max_bytes: int, buffer: bytearray
) -> FetchTotals:
    """Fetch partition 0 of ``topic`` from offset 0 until ``total_records`` have arrived,
    each response received into ``buffer`` (``fetch_buffer``)."""
    module = _request_module(FETCH_KEY, FETCH_VERSION)
    offset = batches = record_set_bytes = response_bytes = 0
    correlation_id = 0
    with connect(port) as sock:
        while offset < total_records:
            request = build(
                module.FetchRequest,
                replica_id=-1,
                max_wait=datetime.timedelta(milliseconds=500),
                min_bytes=1,
                max_bytes=max_bytes,
                topics=(
                    module.FetchTopic(
                        topic=topic,
                        partitions=(
                            module.FetchPartition(
                                partition=0, fetch_offset=offset, partition_max_bytes=max_bytes
                            ),
                        ),
                    ),
                ),
                forgotten_topics_data=(),
            )
            correlation_id += 1
            sock.sendall(
                encode_request(FETCH_KEY, FETCH_VERSION, correlation_id, "lean-bench", request)
            )
            view = read_frame(sock, buffer)
            response_bytes += 4 + len(view)
            records = _fetched_records(view, correlation_id)
            offset, count, whole_bytes = _walk_batches(records, offset)
            batches += count
            record_set_bytes += whole_bytes
    if offset != total_records:
        raise LeanClientError(f"fetched up to offset {offset}, expected {total_records}")
    return FetchTotals(
        records=offset,
        batches=batches,
        record_set_bytes=record_set_bytes,
        response_bytes=response_bytes,
    )


def _fetched_records(view: memoryview, correlation_id: int) -> memoryview:
    got, _throttle, error, _session, topics = _FETCH_TOP.unpack_from(view, 0)
    if got != correlation_id or error != 0 or topics != 1:
        raise LeanClientError(f"fetch response {got}: error {error}, {topics} topics")
    position = _FETCH_TOP.size
    (name_bytes,) = _I16.unpack_from(view, position)
    position += 2 + name_bytes
    (partitions,) = _I32.unpack_from(view, position)
    position += 4
    index, error, *_offsets = _FETCH_PARTITION.unpack_from(view, position)
    if partitions != 1 or index != 0 or error != 0:
        raise LeanClientError(f"fetch of partition {index}: error {error}")
    position += _FETCH_PARTITION.size
    (aborted,) = _I32.unpack_from(view, position)
    position += 4 + 16 * max(aborted, 0) + 4  # aborted transactions, preferred read replica
    (size,) = _I32.unpack_from(view, position)
    position += 4
    if size < 0 or position + size != len(view):
        raise LeanClientError(f"record set of {size} bytes in a {len(view)}-byte response")
    return view[position : position + size]


def _walk_batches(records: memoryview, offset: int) -> tuple[int, int, int]:
    """(next offset, whole batches, their bytes) of a record set that must continue at
    ``offset``; a partial batch at the end is not counted (the next fetch repeats it)."""
    position = count = 0
    end = len(records)
    while end - position >= _BATCH_HEAD.size:
        base_offset, length = _BATCH_HEAD.unpack_from(records, position)
        if position + 12 + length > end:
            break
        if records[position + 16] != 2 or base_offset != offset:
            raise LeanClientError(f"batch at offset {base_offset} where {offset} was expected")
        (last_delta,) = _LAST_OFFSET_DELTA.unpack_from(records, position + 23)
        offset = base_offset + last_delta + 1
        position += 12 + length
        count += 1
    return offset, count, position


def _request_module(api_key: int, api_version: int) -> Any:
    return sys.modules[load_request_schema(api_key, api_version).__module__]
