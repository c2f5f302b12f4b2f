"""ProduceResponse (key 0, v3-v12) encoded by hand: kio's generic encoder costs ~100 us for
these few dozen bytes, once for every Produce request.

Every other response but Fetch is encoded by ``kio`` (``protocol.encode_response``); this
encoder is tested byte for byte against it. Frame (int8/16/32/64 big-endian; "uv" an unsigned
varint; "flex" means v9+, where arrays and strings are compact and structs end in tagged
fields)::

    size                       int32    bytes after this field
    correlation_id             int32
    header tagged fields       uv 0                                  flex only
    responses                  int32 count | flex: uv count+1
      name                     int16 len + utf-8 | flex: uv len+1 + utf-8
      partition_responses      int32 count | flex: uv count+1
        index                  int32
        error_code             int16
        base_offset            int64
        log_append_time_ms     int64   (-1: none)
        log_start_offset       int64                                 v5+
        record_errors          int32 count | flex: uv count+1        v8+
          batch_index          int32
          batch_index_error_message  nullable string: int16 len, -1 null
                                     | flex: uv len+1, 0 null
          tagged fields        uv 0                                  flex only
        error_message          nullable string (as above)            v8+
        tagged fields          flex only: uv count, then per tag uv tag, uv size, value:
                                 tag 0 current_leader = leader_id int32, leader_epoch
                                 int32, uv 0 (v10+; written only when not (-1, -1), as
                                 kio does)
      tagged fields            uv 0                                  flex only
    throttle_time_ms           int32
    tagged fields              uv 0                                  flex only (v10+'s tag 0
                                                                     node_endpoints is never
                                                                     written: it is empty)
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from storage_core.server.wire_writer import (
    append_array_length,
    append_nullable_string,
    append_string,
)

MIN_VERSION = 3
MAX_VERSION = 12
FIRST_LOG_START_OFFSET_VERSION = 5
FIRST_RECORD_ERRORS_VERSION = 8
FIRST_FLEXIBLE_VERSION = 9
FIRST_CURRENT_LEADER_VERSION = 10

_I32 = struct.Struct(">i")
_PARTITION_HEAD = struct.Struct(">ihqq")  # index, error_code, base_offset, log_append_time
_I64 = struct.Struct(">q")
_CURRENT_LEADER = struct.Struct(">iiB")  # leader_id, leader_epoch, no tagged fields


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducePartitionResponse:
    """One partition of a ProduceResponse. ``record_errors`` are (batch index, message)."""

    index: int
    error_code: int
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    record_errors: tuple[tuple[int, str | None], ...] = ()
    error_message: str | None = None
    current_leader: tuple[int, int] | None = None  # (leader id, leader epoch)


@dataclass(frozen=True, slots=True, kw_only=True)
class ProduceTopicResponse:
    name: str
    partitions: tuple[ProducePartitionResponse, ...] = ()


def encode_produce_response(
    *,
    version: int,
    correlation_id: int,
    topics: Sequence[ProduceTopicResponse],
    throttle_time_ms: int = 0,
) -> bytes:
    """The whole response frame (size prefix included) of a ProduceResponse of ``version``."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"ProduceResponse v{version} is outside v{MIN_VERSION}-v{MAX_VERSION}")
    flexible = version >= FIRST_FLEXIBLE_VERSION
    out = bytearray(b"\x00\x00\x00\x00")
    out += _I32.pack(correlation_id)
    if flexible:
        out.append(0)
    append_array_length(out, len(topics), flexible)
    for topic in topics:
        append_string(out, topic.name, flexible)
        append_array_length(out, len(topic.partitions), flexible)
        for p in topic.partitions:
            out += _PARTITION_HEAD.pack(p.index, p.error_code, p.base_offset, p.log_append_time_ms)
            if version >= FIRST_LOG_START_OFFSET_VERSION:
                out += _I64.pack(p.log_start_offset)
            if version >= FIRST_RECORD_ERRORS_VERSION:
                append_array_length(out, len(p.record_errors), flexible)
                for batch_index, message in p.record_errors:
                    out += _I32.pack(batch_index)
                    append_nullable_string(out, message, flexible)
                    if flexible:
                        out.append(0)
                append_nullable_string(out, p.error_message, flexible)
            if flexible:
                leader = p.current_leader
                if version < FIRST_CURRENT_LEADER_VERSION or leader is None or leader == (-1, -1):
                    out.append(0)
                else:  # one tagged field: tag 0, size 9, LeaderIdAndEpoch
                    out += b"\x01\x00\x09"
                    out += _CURRENT_LEADER.pack(leader[0], leader[1], 0)
        if flexible:
            out.append(0)
    out += _I32.pack(throttle_time_ms)
    if flexible:
        out.append(0)
    _I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)
