"""The CreateTime window of message.timestamp.before/after.max.ms, checked on real batches
built by the record codec (plain and compressed, records out of order inside a batch)."""

from __future__ import annotations

import pytest

from storage_core.log.log_config import LogConfig
from storage_core.log.log_validator import analyze_and_validate
from storage_core.log.timestamp_window import RecordTimestampOutOfRangeError, TimestampWindow
from storage_core.records import NO_TIMESTAMP, CompressionType, RecordBatch, SimpleRecord
from storage_core.records.memory_records_builder import build_batch

NOW_MS = 1_700_000_000_000
HOUR_MS = 3_600_000


def _window(**configs: str) -> TimestampWindow | None:
    config = LogConfig().with_overrides({k.replace("_", "."): v for k, v in configs.items()})
    return TimestampWindow.maybe_of(config, NOW_MS)


def test_no_window_by_default_and_none_for_log_append_time() -> None:
    assert _window() is None
    assert (
        _window(message_timestamp_type="LogAppendTime", message_timestamp_before_max_ms="1") is None
    )


def test_the_deprecated_difference_bounds_both_sides_until_overridden() -> None:
    assert _window(message_timestamp_difference_max_ms=str(HOUR_MS)) == TimestampWindow(
        earliest_ms=NOW_MS - HOUR_MS, latest_ms=NOW_MS + HOUR_MS
    )
    assert _window(
        message_timestamp_difference_max_ms=str(HOUR_MS), message_timestamp_after_max_ms="0"
    ) == TimestampWindow(earliest_ms=NOW_MS - HOUR_MS, latest_ms=NOW_MS)


@pytest.mark.parametrize("compression", [CompressionType.NONE, CompressionType.GZIP])
def test_a_record_out_of_range_anywhere_in_the_batch_refuses_it(
    compression: CompressionType,
) -> None:
    window = _window(message_timestamp_before_max_ms=str(HOUR_MS))
    assert window is not None
    # The second record is older than the first: the header's base timestamp does not bound it.
    records = [
        SimpleRecord(value=b"a", timestamp=NOW_MS),
        SimpleRecord(value=b"b", timestamp=NOW_MS - 2 * HOUR_MS),
        SimpleRecord(value=b"c", timestamp=NO_TIMESTAMP),
    ]
    buffer = build_batch(records, compression=compression)

    with pytest.raises(RecordTimestampOutOfRangeError) as raised:
        analyze_and_validate(
            buffer, max_message_bytes=1 << 20, segment_bytes=1 << 30, timestamp_window=window
        )
    assert raised.value.error_code == "invalid_timestamp"
    assert f"Timestamp {NOW_MS - 2 * HOUR_MS} of message with offset 1 is out of range" in str(
        raised.value
    )
    assert f"[{NOW_MS - HOUR_MS}, {LogConfig().timestamp_after_max_ms + NOW_MS}]" in str(
        raised.value
    )


def test_records_inside_the_window_and_without_timestamps_pass() -> None:
    window = TimestampWindow(earliest_ms=NOW_MS - 10, latest_ms=NOW_MS + 10)
    batch = RecordBatch.from_buffer(
        build_batch(
            [
                SimpleRecord(value=b"a", timestamp=NOW_MS - 10),
                SimpleRecord(value=b"b", timestamp=NOW_MS + 10),
                SimpleRecord(value=b"c", timestamp=NO_TIMESTAMP),
            ]
        )
    )
    window.check(batch, batch_index=0)
