"""FetchResponse (key 1, v4-v16) encoded by hand, so records can go from segment files to the
socket with sendfile instead of being copied through the codec.

Every other response is encoded by ``kio`` (``protocol.encode_response``); this encoder is
tested byte for byte against it. Frame (int8/16/32/64 big-endian; "uv" an unsigned varint;
"flex" means v12+, where arrays and strings are compact and structs end in tagged fields)::

    size                     int32    bytes after this field
    correlation_id           int32
    header tagged fields     uv 0                                    flex only
    throttle_time_ms         int32
    error_code               int16                                   v7+
    session_id               int32                                   v7+
    responses                int32 count | flex: uv count+1
      topic                  int16 len + utf-8 | flex: uv len+1 + utf-8    v4-v12
      topic_id               16 bytes                                      v13+
      partitions             int32 count | flex: uv count+1
        partition_index      int32
        error_code           int16
        high_watermark       int64
        last_stable_offset   int64
        log_start_offset     int64                                   v5+
        aborted_transactions int32 count, -1 null | flex: uv count+1, 0 null
          producer_id        int64
          first_offset       int64
          tagged fields      uv 0                                    flex only
        preferred_read_replica int32                                 v11+
        records              int32 len, -1 null | flex: uv len+1, 0 null; then the bytes
        tagged fields        flex only: uv count, then per tag uv tag, uv size, value:
                               tag 0 diverging_epoch = epoch int32, end_offset int64, uv 0
                               (written only when not (-1, -1), as kio does)
      tagged fields          uv 0                                    flex only
    tagged fields            uv 0                                    flex only (v16's tag 0
                                                                     node_endpoints is empty)

``encode_fetch_response`` returns ``ResponseParts``: in-memory bytes with the records of each
partition either inline or as a ``FileRegion`` to be sent from its file.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from storage_core.records.file_region import FileRegion
from storage_core.server.response_parts import ResponseParts
from storage_core.server.wire_writer import (
    append_array_length,
    append_string,
    append_uvarint,
)

MIN_VERSION = 4
MAX_VERSION = 16
FIRST_FLEXIBLE_VERSION = 12
FIRST_TOPIC_ID_VERSION = 13
SEPARATE_RECORDS_BYTES = 64 * 1024  # in-memory record sets from this size are not copied

_I32 = struct.Struct(">i")
_TOP_V7 = struct.Struct(">ihi")  # throttle_time_ms, error_code, session_id
_PARTITION_HEAD = struct.Struct(">ihqq")  # index, error_code, high_watermark, last_stable_offset
_I64 = struct.Struct(">q")
_ABORTED = struct.Struct(">qq")
_EPOCH_END_OFFSET = struct.Struct(">iqB")  # epoch, end_offset, no tagged fields


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchPartitionResponse:
    """One partition of a FetchResponse; ``records`` are inline bytes, a file region or null.

    A partition that answers an error carries an empty record set, never null: Kafka sends
    ``MemoryRecords.EMPTY`` with every error, and librdkafka refuses a null record set
    ("invalid MessageSetSize -1"), so it never sees the error (OFFSET_OUT_OF_RANGE would not
    reset its position). Null stays encodable only for parity with the codec.
    """

    partition_index: int
    error_code: int
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset)
    aborted_transactions: tuple[tuple[int, int], ...] | None = None  # (producer id, first)
    preferred_read_replica: int = -1
    records: bytes | memoryview | FileRegion | None = b""


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchTopicResponse:
    """One topic: by name up to v12, by 16-byte topic id from v13."""

    topic: str = ""
    topic_id: bytes = bytes(16)
    partitions: tuple[FetchPartitionResponse, ...] = ()

    def __post_init__(self) -> None:
        if len(self.topic_id) != 16:
            raise ValueError(f"a topic id is 16 bytes, got {len(self.topic_id)}")


def encode_fetch_response(
    *,
    version: int,
    correlation_id: int,
    topics: tuple[FetchTopicResponse, ...] | list[FetchTopicResponse],
    throttle_time_ms: int = 0,
    error_code: int = 0,
    session_id: int = 0,
) -> ResponseParts:
    """The whole response frame (size prefix included) of a FetchResponse of ``version``."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"FetchResponse v{version} is outside v{MIN_VERSION}-v{MAX_VERSION}")
    flexible = version >= FIRST_FLEXIBLE_VERSION
    parts = ResponseParts()
    out = bytearray(b"\x00\x00\x00\x00")
    out += _I32.pack(correlation_id)
    if flexible:
        out.append(0)
    if version >= 7:
        out += _TOP_V7.pack(throttle_time_ms, error_code, session_id)
    else:
        out += _I32.pack(throttle_time_ms)
    append_array_length(out, len(topics), flexible)
    for topic in topics:
        if version >= FIRST_TOPIC_ID_VERSION:
            out += topic.topic_id
        else:
            append_string(out, topic.topic, flexible)
        append_array_length(out, len(topic.partitions), flexible)
        for p in topic.partitions:
            out += _PARTITION_HEAD.pack(
                p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset
            )
            if version >= 5:
                out += _I64.pack(p.log_start_offset)
            aborted = p.aborted_transactions
            if aborted is None:
                out += b"\x00" if flexible else _I32.pack(-1)
            else:
                append_array_length(out, len(aborted), flexible)
                for producer_id, first_offset in aborted:
                    out += _ABORTED.pack(producer_id, first_offset)
                    if flexible:
                        out.append(0)
            if version >= 11:
                out += _I32.pack(p.preferred_read_replica)
            records = p.records
            if records is None:
                out += b"\x00" if flexible else _I32.pack(-1)
            else:
                if flexible:
                    append_uvarint(out, len(records) + 1)
                else:
                    out += _I32.pack(len(records))
                if isinstance(records, FileRegion):
                    parts.append_bytes(out)
                    parts.append_region(records)
                    out = bytearray()
                elif len(records) >= SEPARATE_RECORDS_BYTES:
                    # Records read into memory (remote reads) go out as they are, not copied
                    # into the frame.
                    parts.append_bytes(out)
                    parts.append_bytes(records)
                    out = bytearray()
                else:
                    out += records
            if flexible:
                diverging = p.diverging_epoch
                if diverging is None or diverging == (-1, -1):
                    out.append(0)
                else:  # one tagged field: tag 0, size 13, EpochEndOffset
                    out += b"\x01\x00\x0d"
                    out += _EPOCH_END_OFFSET.pack(diverging[0], diverging[1], 0)
        if flexible:
            out.append(0)
    if flexible:
        out.append(0)
    parts.append_bytes(out)  # handed over: no copy of the inline records
    parts.seal()
    return parts
