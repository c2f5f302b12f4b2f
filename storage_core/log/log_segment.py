"""One segment of a partition's log: a ``.log`` file, its two sparse indexes and its
aborted-transaction index.

Files (all named by the segment's 20-digit base offset):

    .log        record batches v2, back to back, exactly as produced (see ``records.batch``)
    .index      OffsetIndex: (relative last offset int32, position int32) every
                ``index.interval.bytes`` of appended batches
    .timeindex  TimeIndex: (max timestamp so far int64, relative offset int32) at the same points
    .txnindex   TransactionIndex: one 34-byte entry per ABORT marker in the segment; only
                created by the first one (``transaction_index``)

Roll rules are Kafka's (``LogSegment.shouldRoll``): the segment rolls before an append when the
append would push it past ``segment.bytes``, when it is non-empty and older than ``segment.ms``
(minus jitter), when either index is full (the time index counts as full one entry early), or
when the new offsets do not fit a 32-bit relative offset.

Open files: the indexes are mapped on first use (``LazyIndex``) and, with the broker's
``OpenFileCache``, the ``.log`` descriptor and the index mappings of an inactive segment are
closed when idle and opened again on demand; the active segment's stay open
(``set_evictable``, called by ``LogSegments`` as segments roll). A ``.txnindex`` is opened
only when read or written, and is always evictable.

Thread safety: a segment has one writer, serialised by the owning ``Log``'s lock. Reads use
positional reads and may run concurrently with the writer for bytes below the size they observed.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from storage_core.clock import Clock
from storage_core.errors import CorruptRecordError, InvalidOffsetError
from storage_core.log import log_file_utils as files
from storage_core.log.lazy_index import LazyOffsetIndex, LazyTimeIndex
from storage_core.log.leader_epoch_cache import LeaderEpochFileCache
from storage_core.log.producer_append_info import AppendOrigin
from storage_core.log.producer_state import ProducerStateManager
from storage_core.log.producer_state_entry import CompletedTxn, ProducerBatch
from storage_core.log.segment_recovery import is_torn_tail, producer_batch_of
from storage_core.log.segment_values import FetchDataInfo as FetchDataInfo  # noqa: PLC0414 (export)
from storage_core.log.segment_values import FileSlice as FileSlice  # noqa: PLC0414 (export)
from storage_core.log.segment_values import (
    LogOffsetMetadata as LogOffsetMetadata,  # noqa: PLC0414 (export)
)
from storage_core.log.segment_values import LogOffsetPosition, RecoveryResult
from storage_core.log.segment_values import RollParams as RollParams  # noqa: PLC0414 (export)
from storage_core.log.transaction_index import AbortedTxn, TransactionIndex, TxnIndexSearchResult
from storage_core.records import LOG_OVERHEAD, NO_TIMESTAMP, FileRecords
from storage_core.records.open_file_cache import OpenFileCache

INT_MAX = 2**31 - 1
RECENT_APPENDS_MAX = 16
"""Appends a segment remembers the start of (``translate_offset``, ``recent_tail_bytes``)."""


# A batch's first fields (base offset, batch length), and its last offset delta at byte 23.
_LOG_OVERHEAD = struct.Struct(">qi")
_LAST_OFFSET_DELTA = struct.Struct(">i")
_LAST_OFFSET_DELTA_POSITION = 23
_FIRST_BATCH_FIELDS_BYTES = _LAST_OFFSET_DELTA_POSITION + _LAST_OFFSET_DELTA.size


class LogSegment:
    """A ``.log`` file with its offset, time and transaction indexes (Kafka's ``LogSegment``)."""

    def __init__(
        self,
        *,
        log: FileRecords,
        offset_index: LazyOffsetIndex,
        time_index: LazyTimeIndex,
        txn_index: TransactionIndex,
        base_offset: int,
        index_interval_bytes: int,
        roll_jitter_ms: int,
        clock: Clock,
    ) -> None:
        self.log = log
        self.offset_index = offset_index
        self.time_index = time_index
        self.txn_index = txn_index
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.roll_jitter_ms = roll_jitter_ms
        self._clock = clock
        self._evictable = True
        self._created_ms = clock.milliseconds()
        self._bytes_since_last_index_entry = 0
        # Timestamp of the first batch appended: segment.ms is measured from it, as in Kafka.
        self._rolling_based_timestamp: int | None = None
        self._max_timestamp_so_far: int | None = None
        self._offset_of_max_timestamp_so_far: int | None = None
        # First offset -> where the first batch of each of the last RECENT_APPENDS_MAX
        # appends sits (its last offset, position, size), oldest first: a fetch from where
        # the log ended before one of them (a follower's next fetch, a consumer at the HW)
        # starts there, without an index lookup or a read of the batch header; and those
        # bytes were just written (page cache).
        self._recent_append_starts: dict[int, LogOffsetPosition] = {}

    # ------------------------------------------------------------------ opening
    @staticmethod
    def open(
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_size: int,
        roll_jitter_ms: int = 0,
        clock: Clock,
        file_suffix: str = "",
        file_cache: OpenFileCache | None = None,
        indexes_absent: bool = False,
    ) -> LogSegment:
        """The segment's files; the ``.log`` is opened (created if missing), the indexes are
        mapped (the ``.txnindex`` opened) on first use. With ``file_cache`` its files join the
        broker's LRU. ``indexes_absent``: an empty segment whose index files do not exist yet;
        its first append creates them (``LazyIndex``)."""
        return LogSegment(
            log=FileRecords.open(
                files.log_file(directory, base_offset, file_suffix), cache=file_cache
            ),
            offset_index=LazyOffsetIndex(
                files.offset_index_file(directory, base_offset, file_suffix),
                base_offset,
                max_index_size,
                file_cache,
                absent=indexes_absent,
            ),
            time_index=LazyTimeIndex(
                files.time_index_file(directory, base_offset, file_suffix),
                base_offset,
                max_index_size,
                file_cache,
                absent=indexes_absent,
            ),
            txn_index=TransactionIndex(
                base_offset,
                files.txn_index_file(directory, base_offset, file_suffix),
                file_cache,
            ),
            base_offset=base_offset,
            index_interval_bytes=index_interval_bytes,
            roll_jitter_ms=roll_jitter_ms,
            clock=clock,
        )

    # ------------------------------------------------------------------ open files
    def set_evictable(self, evictable: bool) -> None:
        """Whether the broker's open-file cache may close this segment's files when idle:
        never for the active segment (it takes appends into preallocated indexes)."""
        self._evictable = evictable
        self.log.set_evictable(evictable)
        self.offset_index.set_evictable(evictable)
        self.time_index.set_evictable(evictable)

    @contextlib.contextmanager
    def _held_open(self) -> Iterator[None]:
        """Keep the files open through a rebuild that grows the indexes before filling them."""
        evictable = self._evictable
        if evictable:
            self.set_evictable(False)
        try:
            yield
        finally:
            if evictable:
                self.set_evictable(True)

    # ------------------------------------------------------------------ facts
    @property
    def size(self) -> int:
        """Bytes in the ``.log`` file."""
        return self.log.size_in_bytes

    @property
    def path(self) -> Path:
        return self.log.path

    def _max_timestamp_and_offset(self) -> tuple[int, int]:
        # Loaded lazily from the time index, as Kafka does, so opening a segment stays cheap.
        if self._max_timestamp_so_far is None or self._offset_of_max_timestamp_so_far is None:
            last = self.time_index.last_entry
            self._max_timestamp_so_far = last.timestamp
            self._offset_of_max_timestamp_so_far = last.offset
        return self._max_timestamp_so_far, self._offset_of_max_timestamp_so_far

    @property
    def max_timestamp_so_far(self) -> int:
        return self._max_timestamp_and_offset()[0]

    @property
    def offset_of_max_timestamp_so_far(self) -> int:
        return self._max_timestamp_and_offset()[1]

    @property
    def largest_timestamp(self) -> int:
        """The largest record timestamp, or the file's mtime when no batch carries one (Kafka)."""
        if self.max_timestamp_so_far >= 0:
            return self.max_timestamp_so_far
        return self.last_modified_ms

    @property
    def last_modified_ms(self) -> int:
        return os.stat(self.log.path).st_mtime_ns // 1_000_000

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        """How long this segment has been open, measured from its first batch's timestamp."""
        if self._rolling_based_timestamp is None and self.size > 0:
            first = next(iter(self.log.batches(0)), None)
            if first is not None:
                self._rolling_based_timestamp = first[1].max_timestamp
        if self._rolling_based_timestamp is not None and self._rolling_based_timestamp >= 0:
            return message_timestamp - self._rolling_based_timestamp
        return now_ms - self._created_ms

    def should_roll(self, params: RollParams) -> bool:
        """Kafka's roll decision, evaluated before appending ``params.messages_size`` bytes."""
        reached_roll_ms = (
            self.time_waited_for_roll(params.now_ms, params.max_timestamp_in_messages)
            > params.max_segment_ms - self.roll_jitter_ms
        )
        return (
            self.size > params.max_segment_bytes - params.messages_size
            or (self.size > 0 and reached_roll_ms)
            or self.offset_index.is_full()
            or self.time_index.is_full()
            or not self.can_convert_to_relative_offset(params.max_offset_in_messages)
        )

    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT_MAX

    # ------------------------------------------------------------------ writing
    def append(
        self,
        *,
        largest_offset: int,
        largest_timestamp: int,
        offset_of_max_timestamp: int,
        records: Sequence[bytes | bytearray | memoryview],
    ) -> None:
        """Append already-validated batches, given as parts, ending at ``largest_offset``."""
        size = sum(len(part) for part in records)
        if size == 0:
            return
        if not self.can_convert_to_relative_offset(largest_offset):
            raise InvalidOffsetError(
                f"offset {largest_offset} cannot be stored in segment {self.base_offset}"
                " (relative offset out of 32-bit range)"
            )
        if self.offset_index.is_absent or self.time_index.is_absent:
            # before any byte is written: out of descriptors, the append fails whole
            self.offset_index.create_file()
            self.time_index.create_file()
        physical_position = self.log.size_in_bytes
        if physical_position == 0:
            self._rolling_based_timestamp = largest_timestamp
        self.log.append_vectored(records)
        head = records[0]  # the first batch, or its header
        if len(head) >= _FIRST_BATCH_FIELDS_BYTES:
            base_offset, batch_length = _LOG_OVERHEAD.unpack_from(head)
            (last_offset_delta,) = _LAST_OFFSET_DELTA.unpack_from(head, _LAST_OFFSET_DELTA_POSITION)
            recent = self._recent_append_starts
            recent[base_offset] = LogOffsetPosition(
                base_offset + last_offset_delta, physical_position, LOG_OVERHEAD + batch_length
            )
            if len(recent) > RECENT_APPENDS_MAX:
                del recent[next(iter(recent))]
        if largest_timestamp > self.max_timestamp_so_far:
            self._max_timestamp_so_far = largest_timestamp
            self._offset_of_max_timestamp_so_far = offset_of_max_timestamp
        if self._bytes_since_last_index_entry > self.index_interval_bytes:
            self.offset_index.append(largest_offset, physical_position)
            self.time_index.maybe_append(
                self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far
            )
            self._bytes_since_last_index_entry = 0
        self._bytes_since_last_index_entry += size

    def on_becoming_inactive_segment(self) -> None:
        """Called when a newer segment takes over appends: final time-index entry, trim files."""
        self.time_index.maybe_append(
            self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far, skip_full_check=True
        )
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        self.log.trim()

    def resize_indexes(self, size: int) -> None:
        self.offset_index.resize(size)
        self.time_index.resize(size)

    def flush(self) -> None:
        self.log.flush()
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def update_txn_index(self, completed_txn: CompletedTxn, last_stable_offset: int) -> None:
        """Record ``completed_txn`` in the ``.txnindex`` if it was aborted (Kafka's
        ``updateTxnIndex``); its ABORT marker is in this segment. ``last_stable_offset``:
        ``ProducerStateManager.last_stable_offset(completed_txn)``, taken before
        ``complete_txn``."""
        if completed_txn.is_aborted:
            self.txn_index.append(AbortedTxn.of(completed_txn, last_stable_offset))

    def collect_aborted_txns(
        self, fetch_offset: int, upper_bound_offset: int
    ) -> TxnIndexSearchResult:
        """Aborted transactions of this segment overlapping ``[fetch_offset,
        upper_bound_offset)`` (see ``TransactionIndex.collect_aborted_txns``)."""
        return self.txn_index.collect_aborted_txns(fetch_offset, upper_bound_offset)

    # ------------------------------------------------------------------ reading
    def recent_tail_bytes(self, offset: int) -> int | None:
        """Bytes from ``offset`` to the end of this segment when ``offset`` starts one of its
        last ``RECENT_APPENDS_MAX`` appends (bytes just written, so in the page cache); None
        otherwise."""
        start = self._recent_append_starts.get(offset)
        return None if start is None else self.log.size_in_bytes - start.position

    def translate_offset(
        self, offset: int, starting_file_position: int = 0
    ) -> LogOffsetPosition | None:
        """The batch holding ``offset`` (its last offset, position, size), or None if beyond."""
        recent = self._recent_append_starts.get(offset)
        if recent is not None and recent.position >= starting_file_position:
            return recent  # the first batch of a recent append starts at ``offset``
        position = max(self.offset_index.lookup(offset).position, starting_file_position)
        found = self.log.search_for_offset_with_size(offset, position)
        if found is None:
            return None
        last_offset, position, size = found
        return LogOffsetPosition(last_offset, position, size)

    def read(
        self,
        start_offset: int,
        max_size: int,
        *,
        max_position: int | None = None,
        min_one_message: bool = False,
    ) -> FetchDataInfo | None:
        """Bytes from the batch holding ``start_offset`` up to ``max_size`` (Kafka semantics).

        The first batch may start before ``start_offset``; the last may be cut at ``max_size``
        (clients discard a partial trailing batch). With ``min_one_message`` the first batch is
        returned whole even if larger than ``max_size``. None when the offset is past the end.
        """
        if max_size < 0:
            raise ValueError(f"max_size must be >= 0, got {max_size}")
        limit = self.size if max_position is None else max_position
        start = self.translate_offset(start_offset)
        if start is None:
            return None
        metadata = LogOffsetMetadata(start_offset, self.base_offset, start.position)
        adjusted_max_size = max(max_size, start.size) if min_one_message else max_size
        if adjusted_max_size == 0 or start.position >= limit:
            return FetchDataInfo(metadata, None)
        fetch_size = min(limit - start.position, adjusted_max_size)
        return FetchDataInfo(
            metadata,
            FileSlice(self.log, start.position, fetch_size),
            first_entry_incomplete=adjusted_max_size < start.size,
        )

    def read_next_offset(self) -> int:
        """The offset after the last batch, found from the last index entry onwards."""
        start_position = self.offset_index.lookup(self.offset_index.last_offset).position
        next_offset = self.base_offset
        for _position, header in self.log.batches(start_position):
            next_offset = header.next_offset
        return next_offset

    def find_offset_by_timestamp(
        self, timestamp: int, starting_offset: int
    ) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record at or after both ``timestamp`` and offset."""
        mapping = self.time_index.lookup(timestamp)
        position = self.offset_index.lookup(max(mapping.offset, starting_offset)).position
        return self.log.search_for_timestamp(timestamp, position, starting_offset)

    # ------------------------------------------------------------------ repair
    def recover(
        self,
        producer_state: ProducerStateManager,
        leader_epoch_cache: LeaderEpochFileCache | None = None,
        *,
        before_cut: Callable[[RecoveryResult], None] | None = None,
    ) -> RecoveryResult:
        """Rebuild the three indexes from the ``.log`` and cut it after the last valid batch
        (Kafka's ``recover(producerStateManager, leaderEpochCache)``).

        Every batch is checked (header, size, CRC); the first one that fails ends the valid
        prefix. ``producer_state`` holds the state at this segment's base offset and follows
        the batches: each aborted transaction whose marker is here is indexed with the LSO of
        that moment. ``before_cut`` sees the result while the bytes to be cut are still on
        disk. Returns what was kept and, when bytes were cut, why.
        """
        with self._held_open():
            return self._recover(producer_state, leader_epoch_cache, before_cut)

    def _recover(
        self,
        producer_state: ProducerStateManager,
        leader_epoch_cache: LeaderEpochFileCache | None,
        before_cut: Callable[[RecoveryResult], None] | None,
    ) -> RecoveryResult:
        self._recent_append_starts.clear()
        self.offset_index.truncate()
        self.offset_index.resize(self.offset_index.max_index_size)
        self.time_index.truncate()
        self.time_index.resize(self.time_index.max_index_size)
        self.txn_index.reset()
        self._max_timestamp_so_far = NO_TIMESTAMP
        self._offset_of_max_timestamp_so_far = self.base_offset
        valid_bytes = 0
        last_index_entry = 0
        reason: str | None = None
        torn_tail = False
        file_size = self.log.size_in_bytes
        try:
            for position, header in self.log.batches(0):
                batch = header.load(self.log)
                batch.ensure_valid()
                if not self.can_convert_to_relative_offset(batch.last_offset):
                    raise CorruptRecordError(
                        f"batch offsets {batch.base_offset}..{batch.last_offset} do not belong"
                        f" to segment {self.base_offset}",
                        file=str(self.log.path),
                        position=position,
                        offset=batch.base_offset,
                    )
                producer_batch = producer_batch_of(batch, self.log.path, position)
                if batch.max_timestamp > self._max_timestamp_so_far:
                    self._max_timestamp_so_far = batch.max_timestamp
                    self._offset_of_max_timestamp_so_far = batch.last_offset
                if valid_bytes - last_index_entry > self.index_interval_bytes:
                    self.offset_index.append(batch.last_offset, valid_bytes)
                    self.time_index.maybe_append(
                        self._max_timestamp_so_far, self._offset_of_max_timestamp_so_far
                    )
                    last_index_entry = valid_bytes
                valid_bytes += batch.size_in_bytes
                if leader_epoch_cache is not None and batch.partition_leader_epoch >= 0:
                    latest = leader_epoch_cache.latest_epoch
                    if latest is None or batch.partition_leader_epoch > latest:
                        leader_epoch_cache.assign(batch.partition_leader_epoch, batch.base_offset)
                self._update_producer_state(producer_state, producer_batch)
                producer_state.update_map_end_offset(batch.last_offset + 1)
        except CorruptRecordError as exc:
            reason = exc.reason
            torn_tail = is_torn_tail(self.log, valid_bytes, file_size)
        truncated = file_size - valid_bytes
        result = RecoveryResult(
            valid_bytes=valid_bytes, truncated_bytes=truncated, reason=reason, torn_tail=torn_tail
        )
        if truncated > 0:
            if before_cut is not None:
                before_cut(result)
            self.log.truncate_to(valid_bytes)
        self.offset_index.trim_to_valid_size()
        self.time_index.maybe_append(
            self._max_timestamp_so_far, self._offset_of_max_timestamp_so_far, skip_full_check=True
        )
        self.time_index.trim_to_valid_size()
        self._bytes_since_last_index_entry = valid_bytes - last_index_entry
        self._rolling_based_timestamp = None
        return result

    def _update_producer_state(
        self, producer_state: ProducerStateManager, batch: ProducerBatch | None
    ) -> None:
        """Kafka's ``LogSegment.updateProducerState``: apply one recovered batch and index the
        transaction it aborts."""
        if batch is None:
            return
        append_info = producer_state.prepare_update(batch.producer_id, AppendOrigin.REPLICATION)
        completed = append_info.append(batch)
        producer_state.update(append_info)
        if completed is not None:
            self.update_txn_index(completed, producer_state.last_stable_offset(completed))
            producer_state.complete_txn(completed)

    def truncate_to(self, offset: int) -> int:
        """Drop every batch at or after the one holding ``offset``; returns bytes removed."""
        with self._held_open():
            return self._truncate_to(offset)

    def _truncate_to(self, offset: int) -> int:
        mapping = self.translate_offset(offset)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        self.offset_index.resize(self.offset_index.max_index_size)
        self.time_index.resize(self.time_index.max_index_size)
        removed = 0 if mapping is None else self.log.truncate_to(mapping.position)
        self._recent_append_starts.clear()
        if self.log.size_in_bytes == 0:
            self._created_ms = self._clock.milliseconds()
            self._rolling_based_timestamp = None
        self._bytes_since_last_index_entry = 0
        self._max_timestamp_so_far = None
        self._offset_of_max_timestamp_so_far = None
        return removed

    # ------------------------------------------------------------------ lifecycle
    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Rename the segment's files (e.g. to ``.deleted`` before an asynchronous delete);
        a ``.txnindex`` that does not exist is only renamed in name."""
        for name in ("log", "offset_index", "time_index", "txn_index"):
            component = getattr(self, name)
            path = component.path
            new_name = path.name.removesuffix(old_suffix) + new_suffix
            component.rename_to(path.with_name(new_name))

    def close(self) -> None:
        self.offset_index.close()
        self.time_index.close()
        self.log.close()
        self.txn_index.close()

    def delete_if_exists(self) -> None:
        self.offset_index.delete_if_exists()
        self.time_index.delete_if_exists()
        self.txn_index.delete_if_exists()
        self.log.delete()

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size})"
