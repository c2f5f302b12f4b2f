"""The leader's validation of batches (Kafka's LogValidator): max timestamps and timestamp types.

Stored batches are read back with kafka-python's independent codec, which checks the CRC.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest
from crc32c import crc32c
from kafka.record.default_records import DefaultRecordBatch

from storage_core.errors import InvalidRecordError, InvalidRecordTimestampError
from storage_core.log.log import Log
from storage_core.log.log_config import LogConfig
from storage_core.log.log_validator import analyze_and_validate, assign_offsets
from storage_core.records import CompressionType, SimpleRecord, build_batch
from tests.conftest import BASE_TIMESTAMP_MS

OpenLog = Callable[..., Log]
HEADER = struct.Struct(">qiibIhiqqqhii")
LIMITS = {"max_message_bytes": 1 << 20, "segment_bytes": 1 << 30}
TIMESTAMPS = [BASE_TIMESTAMP_MS, BASE_TIMESTAMP_MS + 5_000, BASE_TIMESTAMP_MS + 2_000]


def batch_with(
    *, max_timestamp: int, attributes: int | None = None, compression: CompressionType
) -> bytes:
    built = build_batch(
        [SimpleRecord(value=b"v%d" % i, timestamp=ts) for i, ts in enumerate(TIMESTAMPS)],
        compression=compression,
    )
    fields = list(HEADER.unpack_from(built))
    fields[8] = max_timestamp
    if attributes is not None:
        fields[5] = attributes
    out = bytearray(HEADER.pack(*fields) + built[HEADER.size :])
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def stored(parts: list[bytes | bytearray | memoryview]) -> DefaultRecordBatch:
    batch = DefaultRecordBatch(bytearray(b"".join(bytes(p) for p in parts)))
    assert batch.validate_crc()
    return batch


@pytest.mark.parametrize("compression", [CompressionType.NONE, CompressionType.ZSTD])
@pytest.mark.parametrize(
    "header_max", [BASE_TIMESTAMP_MS, BASE_TIMESTAMP_MS + 9_999, -1], ids=["low", "high", "none"]
)
def test_the_max_timestamp_is_recomputed_from_the_records(
    compression: CompressionType, header_max: int
) -> None:
    data = batch_with(max_timestamp=header_max, compression=compression)
    info = analyze_and_validate(data, **LIMITS)
    assigned, parts = assign_offsets(data, info, next_offset=100, leader_epoch=3)
    assert assigned.max_timestamp == max(TIMESTAMPS)
    assert assigned.batches[0].max_timestamp == max(TIMESTAMPS)
    batch = stored(parts)
    assert (batch.max_timestamp, batch.base_offset, batch.timestamp_type) == (
        max(TIMESTAMPS),
        100,
        0,
    )
    assert [r.timestamp for r in batch] == TIMESTAMPS


def test_a_right_max_timestamp_keeps_the_body_uncopied() -> None:
    data = batch_with(max_timestamp=max(TIMESTAMPS), compression=CompressionType.NONE)
    info = analyze_and_validate(data, **LIMITS)
    _assigned, parts = assign_offsets(data, info, next_offset=0, leader_epoch=0)
    assert len(parts) == 2
    assert isinstance(parts[1], memoryview)  # a view of the request, not a copy
    assert stored(parts).max_timestamp == max(TIMESTAMPS)


def test_a_client_log_append_time_batch_on_a_create_time_topic_is_stored_as_create_time() -> None:
    """Kafka keeps the header's max timestamp and clears the LogAppendTime flag."""
    data = batch_with(
        max_timestamp=BASE_TIMESTAMP_MS + 7, attributes=0x08, compression=CompressionType.NONE
    )
    info = analyze_and_validate(data, **LIMITS)
    assigned, parts = assign_offsets(data, info, next_offset=0, leader_epoch=0)
    batch = stored(parts)
    assert (batch.timestamp_type, batch.max_timestamp) == (0, BASE_TIMESTAMP_MS + 7)
    assert assigned.max_timestamp == BASE_TIMESTAMP_MS + 7


@pytest.mark.parametrize(
    ("header_max", "topic_log_append_time"),
    [(BASE_TIMESTAMP_MS, True), (-1, False)],
    ids=["log-append-time topic", "no timestamp"],
)
def test_a_client_log_append_time_batch_is_invalid_timestamp_where_kafka_refuses_it(
    header_max: int, topic_log_append_time: bool
) -> None:
    data = batch_with(max_timestamp=header_max, attributes=0x08, compression=CompressionType.NONE)
    info = analyze_and_validate(data, **LIMITS)
    with pytest.raises(InvalidRecordTimestampError) as caught:
        assign_offsets(
            data,
            info,
            next_offset=0,
            leader_epoch=0,
            log_append_time_ms=BASE_TIMESTAMP_MS if topic_log_append_time else None,
        )
    assert caught.value.error_code == "invalid_timestamp"
    assert [index for index, _ in caught.value.record_errors] == [0, 1, 2]


def test_list_offsets_by_timestamp_finds_a_record_above_the_header_max(open_log: OpenLog) -> None:
    log = open_log(LogConfig(index_interval_bytes=1))
    data = batch_with(max_timestamp=BASE_TIMESTAMP_MS, compression=CompressionType.NONE)
    log.append_as_leader(data, leader_epoch=0)
    found = log.offset_for_timestamp(BASE_TIMESTAMP_MS + 3_000)
    assert found is not None
    assert (found.offset, found.timestamp) == (1, BASE_TIMESTAMP_MS + 5_000)


def test_a_malformed_record_is_refused_before_anything_is_written(open_log: OpenLog) -> None:
    log = open_log()
    good = build_batch([SimpleRecord(value=b"ok", timestamp=BASE_TIMESTAMP_MS)])
    log.append_as_leader(good, leader_epoch=0)
    bad = bytearray(build_batch([SimpleRecord(value=b"bad", timestamp=BASE_TIMESTAMP_MS)]))
    bad[61] = 9  # record length -5
    struct.pack_into(">I", bad, 17, crc32c(bytes(bad[21:])))
    with pytest.raises(InvalidRecordError) as caught:
        log.append_as_leader(bytes(bad), leader_epoch=0)
    assert caught.value.record_errors[0][0] == 0
    assert log.log_end_offset == 1
    assert log.size_in_bytes == len(good)
