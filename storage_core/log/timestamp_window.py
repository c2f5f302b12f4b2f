"""The CreateTime window a leader enforces on appends (Kafka 3.6+, KIP-937).

A record's CreateTime must lie within ``[now - message.timestamp.before.max.ms,
now + message.timestamp.after.max.ms]`` (both inclusive), ``now`` being the broker's clock
when the append is validated; records without a timestamp (-1) pass. A batch with a record
outside it is refused whole with INVALID_TIMESTAMP, as Kafka's ``LogValidator`` does. Topics
with ``message.timestamp.type=LogAppendTime`` and topics that keep both bounds at their
defaults (no window) are not checked, so their appends never decode records for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from storage_core.errors import StorageError
from storage_core.log.log_config import LONG_MAX, LogConfig
from storage_core.records import NO_TIMESTAMP, RecordBatch


class RecordTimestampOutOfRangeError(StorageError):
    """A record's CreateTime lies outside the topic's timestamp window; nothing is written.

    The producer's clock is off, or the records are older (newer) than the topic accepts:
    fix the timestamps or widen ``message.timestamp.before.max.ms`` / ``...after.max.ms``.
    """

    error_code = "invalid_timestamp"


@dataclass(frozen=True, slots=True, kw_only=True)
class TimestampWindow:
    """``[earliest_ms, latest_ms]`` (inclusive) for record CreateTimes."""

    earliest_ms: int
    latest_ms: int

    @staticmethod
    def maybe_of(config: LogConfig, now_ms: int) -> TimestampWindow | None:
        """The window of a topic at ``now_ms``, or None when the topic has none."""
        if config.uses_log_append_time:
            return None
        before_ms, after_ms = config.timestamp_before_max_ms, config.timestamp_after_max_ms
        if before_ms == LONG_MAX and after_ms == LONG_MAX:
            return None
        return TimestampWindow(earliest_ms=now_ms - before_ms, latest_ms=now_ms + after_ms)

    def check(self, batch: RecordBatch, *, batch_index: int) -> None:
        """Raise ``RecordTimestampOutOfRangeError`` naming the first record out of range."""
        for record in batch.records():
            if record.timestamp == NO_TIMESTAMP:
                continue
            if not self.earliest_ms <= record.timestamp <= self.latest_ms:
                raise RecordTimestampOutOfRangeError(
                    f"One or more records have been rejected due to invalid timestamp: batch"
                    f" {batch_index}: Timestamp {record.timestamp} of message with offset"
                    f" {record.offset} is out of range. The timestamp should be within"
                    f" [{self.earliest_ms}, {self.latest_ms}]"
                )
