"""The Fetch a follower sends its leader (v12) and its answer, encoded and decoded by hand
(Kafka's ``FetchRequest.Builder.forReplica`` and ``FetchResponse``).

A follower sends one Fetch per replication round, and the answer carries the leader's
batches. kio's generic codec builds an object per field and walks the schema for every
message: for this one exchange it cost more than the follower's append of the records. Every
other request keeps kio. Flexible version (KIP-482) layout, big-endian::

    FetchRequest v12   replica_id int32, max_wait_ms int32, min_bytes int32, max_bytes int32,
                       isolation_level int8, session_id int32, session_epoch int32,
                       topics [topic string, partitions [partition int32,
                         current_leader_epoch int32, fetch_offset int64,
                         last_fetched_epoch int32, log_start_offset int64,
                         partition_max_bytes int32, tags] tags],
                       forgotten_topics_data [topic string, partitions [int32] tags],
                       rack_id string, tags
    FetchResponse v12  throttle_time_ms int32, error_code int16, session_id int32,
                       responses [topic string, partitions [partition_index int32,
                         error_code int16, high_watermark int64, last_stable_offset int64,
                         log_start_offset int64, aborted_transactions nullable [producer_id
                         int64, first_offset int64, tags], preferred_read_replica int32,
                         records nullable bytes, tags] tags], tags

Strings, byte fields and arrays are compact: an unsigned varint of length + 1 (0: null).
``tags`` is a tagged-field section: a varint count, then (varint tag, varint size, bytes)
each. A partition's tag 0 is its ``diverging_epoch`` (epoch int32, end_offset int64, tags);
other tags (the current leader, a snapshot id) are skipped, as Kafka skips tags it does not
read. The request sends no tags.

Pure functions, no I/O; thread-safe.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import NamedTuple

from storage_core.client.errors import ProtocolMismatchError
from storage_core.errors import CorruptRecordError
from storage_core.records.varint import decode_unsigned_varint, encode_unsigned_varint

API_KEY = 1
VERSION = 12
DIVERGING_EPOCH_TAG = 0

Body = bytes | memoryview

_REQUEST_TOP = struct.Struct(">iiiibii")
_REQUEST_PARTITION = struct.Struct(">iiqiqi")
_RESPONSE_TOP = struct.Struct(">ihi")
_PARTITION_HEAD = struct.Struct(">ihqqq")
_ABORTED = struct.Struct(">qq")
_I32 = struct.Struct(">i")
_EPOCH_END_OFFSET = struct.Struct(">iq")
_NO_TAGS = b"\x00"
_EMPTY_ARRAY = b"\x01"
_EMPTY_STRING = b"\x01"


class PartitionFetch(NamedTuple):
    """One partition of a replica's Fetch request."""

    topic: str
    partition: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int
    partition_max_bytes: int


class FetchedPartition(NamedTuple):
    """One partition of a Fetch response; ``records`` is None when the leader sent null, else
    a slice of the body (a view, not a copy, when the body is a ``memoryview``)."""

    topic: str
    partition: int
    error_code: int
    high_watermark: int
    log_start_offset: int
    records: Body | None
    diverging_epoch: tuple[int, int] | None  # (epoch, end offset)


def encode_fetch_request(
    *,
    replica_id: int,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    isolation_level: int,
    session_id: int,
    session_epoch: int,
    partitions: Iterable[PartitionFetch],
    forgotten: Iterable[tuple[str, int]] = (),
) -> bytes:
    """The request body (after the request header); partitions of a topic are grouped in
    the order the topic first appears, and so are the ``(topic, partition)``s ``forgotten``
    (removed from the fetch session)."""
    by_topic: dict[str, list[PartitionFetch]] = {}
    for p in partitions:
        by_topic.setdefault(p.topic, []).append(p)
    out = bytearray(
        _REQUEST_TOP.pack(
            replica_id,
            max_wait_ms,
            min_bytes,
            max_bytes,
            isolation_level,
            session_id,
            session_epoch,
        )
    )
    out += encode_unsigned_varint(len(by_topic) + 1)
    for topic, fetches in by_topic.items():
        _append_compact_string(out, topic)
        out += encode_unsigned_varint(len(fetches) + 1)
        for p in fetches:
            out += _REQUEST_PARTITION.pack(
                p.partition,
                p.current_leader_epoch,
                p.fetch_offset,
                p.last_fetched_epoch,
                p.log_start_offset,
                p.partition_max_bytes,
            )
            out += _NO_TAGS
        out += _NO_TAGS
    forgotten_by_topic: dict[str, list[int]] = {}
    for topic, partition in forgotten:
        forgotten_by_topic.setdefault(topic, []).append(partition)
    out += encode_unsigned_varint(len(forgotten_by_topic) + 1)
    for topic, numbers in forgotten_by_topic.items():
        _append_compact_string(out, topic)
        out += encode_unsigned_varint(len(numbers) + 1)
        for number in numbers:
            out += _I32.pack(number)
        out += _NO_TAGS
    out += _EMPTY_STRING  # rack_id
    out += _NO_TAGS
    return bytes(out)


def decode_fetch_response(body: Body) -> tuple[int, list[FetchedPartition]]:
    """``(top-level error code, partitions in response order)`` of a response body (after
    the response header); ``ProtocolMismatchError`` when it does not fill the body exactly."""
    error_code, _session_id, partitions = decode_fetch_session_response(body)
    return error_code, partitions


def decode_fetch_session_response(body: Body) -> tuple[int, int, list[FetchedPartition]]:
    """``(top-level error code, session id, partitions in response order)``, as
    ``decode_fetch_response``."""
    try:
        return _Reader(body).response()
    except (struct.error, CorruptRecordError, UnicodeDecodeError) as error:
        raise ProtocolMismatchError(f"cannot decode a Fetch v12 response: {error}") from None


def _append_compact_string(out: bytearray, value: str) -> None:
    data = value.encode()
    out += encode_unsigned_varint(len(data) + 1)
    out += data


class _Reader:
    """A cursor over a response body; short reads raise ``struct.error``."""

    __slots__ = ("buffer", "position")

    def __init__(self, buffer: Body) -> None:
        self.buffer = buffer
        self.position = 0

    def response(self) -> tuple[int, int, list[FetchedPartition]]:
        _throttle_time_ms, error_code, session_id = self._unpack(_RESPONSE_TOP)
        partitions: list[FetchedPartition] = []
        for _ in range(self._array_length("responses")):
            topic = self._string("topic")
            for _ in range(self._array_length("partitions")):
                partitions.append(self._partition(topic))
            self._skip_tags()
        self._skip_tags()
        if self.position != len(self.buffer):
            raise ProtocolMismatchError(
                f"Fetch v12 response has {len(self.buffer) - self.position} trailing bytes"
            )
        return error_code, session_id, partitions

    def _partition(self, topic: str) -> FetchedPartition:
        index, error_code, high_watermark, _lso, log_start_offset = self._unpack(_PARTITION_HEAD)
        aborted = self._varint() - 1
        for _ in range(max(aborted, 0)):
            self._unpack(_ABORTED)
            self._skip_tags()
        self._unpack(_I32)  # preferred_read_replica
        size = self._varint() - 1
        records: Body | None = None
        if size >= 0:
            end = self.position + size
            if end > len(self.buffer):
                raise struct.error(f"records of {size} bytes run past the end of the response")
            records = self.buffer[self.position : end]
            self.position = end
        diverging: tuple[int, int] | None = None
        for tag, start, end in self._tags():
            if tag == DIVERGING_EPOCH_TAG:
                if end - start < _EPOCH_END_OFFSET.size:
                    raise struct.error(f"diverging_epoch of {end - start} bytes")
                epoch, end_offset = _EPOCH_END_OFFSET.unpack_from(self.buffer, start)
                diverging = (epoch, end_offset)
        return FetchedPartition(
            topic=topic,
            partition=index,
            error_code=error_code,
            high_watermark=high_watermark,
            log_start_offset=log_start_offset,
            records=records,
            diverging_epoch=diverging,
        )

    def _unpack(self, layout: struct.Struct) -> tuple[int, ...]:
        values = layout.unpack_from(self.buffer, self.position)
        self.position += layout.size
        return values

    def _varint(self) -> int:
        value, self.position = decode_unsigned_varint(self.buffer, self.position)
        return value

    def _array_length(self, what: str) -> int:
        length = self._varint() - 1
        if length < 0:
            raise ProtocolMismatchError(f"Fetch v12 response has a null {what} array")
        return length

    def _string(self, what: str) -> str:
        size = self._varint() - 1
        if size < 0:
            raise ProtocolMismatchError(f"Fetch v12 response has a null {what}")
        end = self.position + size
        if end > len(self.buffer):
            raise struct.error(f"{what} runs past the end of the response")
        value = str(self.buffer[self.position : end], "utf-8")
        self.position = end
        return value

    def _tags(self) -> list[tuple[int, int, int]]:
        """``(tag, start, end)`` of each tagged field; the cursor moves past the section."""
        fields = []
        for _ in range(self._varint()):
            tag = self._varint()
            size = self._varint()
            start = self.position
            self.position += size
            if self.position > len(self.buffer):
                raise struct.error(f"tagged field {tag} runs past the end of the response")
            fields.append((tag, start, self.position))
        return fields

    def _skip_tags(self) -> None:
        self._tags()
