"""Loading a partition directory at startup, with recovery after an unclean shutdown.

Steps (Kafka's ``LogLoader``):

1. Remove stray files: ``.deleted`` (a deletion that was interrupted), ``.cleaned`` and
   ``.swap`` (an interrupted rewrite), ``.tmp`` (an interrupted checkpoint write), and index
   files (``.index``, ``.timeindex``, ``.txnindex``) whose ``.log`` is gone.
2. Open every segment. A missing or inconsistent index is rebuilt from its ``.log`` (a missing
   ``.txnindex`` is not a problem: a segment without aborted transactions has none; nor are
   missing ``.index`` and ``.timeindex`` files of an empty last segment, a new log's first
   segment before its first append, whose append creates them). Indexes
   are mapped lazily (``LazyIndex``): only those of the segments recovery will read (the active
   one, and after an unclean shutdown those from the recovery point on) are mapped and checked
   entry by entry here, as Kafka checks only what it recovers; the others are checked without
   being mapped (present, a whole number of entries) and mapped on first use. A rebuild needs
   the producer state at the segment's base offset, which is replayed (from the newest
   producer snapshot below it) over the segments before it, as Kafka's ``recoverSegment``.
3. After an unclean shutdown, validate every batch of every segment from the one holding the
   recovery point on, rebuilding their indexes and the producer state with them. The first
   torn or corrupt batch ends the log: the segment is cut there and later segments are set
   aside. Cut bytes that are more than a torn tail, and set-aside
   segments, are kept as ``*.quarantined`` files, never deleted, so no byte that was on disk is
   lost; an operator can inspect them with ``storage-core dump-log``.
   After a clean shutdown recovery is skipped (Kafka), but the active segment must still read
   to its end: one that does not (a file cut or damaged while the broker was down) is recovered
   as after a crash, and then even a torn tail is kept aside, since the clean shutdown says
   those bytes were once complete.
4. Offsets: the log end offset comes from the last segment; the log start offset is the larger
   of its checkpoint and the first segment's base offset; the leader-epoch cache is cut to both.

A log whose directory was just created (``create_new_log``) skips all of it: there is nothing to
scan, and its first segment's index files wait for its first append.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from storage_core.atomic_file import TEMP_FILE_SUFFIX
from storage_core.clock import Clock
from storage_core.common import TopicPartition
from storage_core.errors import CorruptCheckpointError, CorruptIndexError, CorruptRecordError
from storage_core.log import log_file_utils as files
from storage_core.log.lazy_index import LazyOffsetIndex, LazyTimeIndex
from storage_core.log.leader_epoch_cache import (
    LEADER_EPOCH_CHECKPOINT_FILENAME,
    LeaderEpochCheckpointFile,
    LeaderEpochFileCache,
)
from storage_core.log.local_log import create_segment
from storage_core.log.log_config import LogConfig
from storage_core.log.log_producer_state import rebuild_producer_state
from storage_core.log.log_segment import LogSegment
from storage_core.log.log_segments import LogSegments
from storage_core.log.producer_state import ProducerStateManager
from storage_core.log.segment_values import RecoveryResult
from storage_core.log.transaction_index import TransactionIndex
from storage_core.records.open_file_cache import OpenFileCache

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadedLog:
    """Segments in base-offset order (the last is active) and the offsets recovered."""

    segments: list[LogSegment]
    log_start_offset: int
    recovery_point: int
    log_end_offset: int
    recovered_segments: int
    truncated_bytes: int


def remove_stray_files(directory: Path, partition: str) -> list[Path]:
    """Step 1: delete leftovers of interrupted deletes, rewrites and checkpoint writes."""
    removed: list[Path] = []
    log_bases: set[str] = set()
    for entry in directory.iterdir():
        if entry.name.endswith(files.LOG_FILE_SUFFIX):
            log_bases.add(entry.name.removesuffix(files.LOG_FILE_SUFFIX))
    for entry in directory.iterdir():
        name = entry.name
        if not entry.is_file() or name.endswith(files.QUARANTINED_FILE_SUFFIX):
            continue
        stray = name.endswith(files.STRAY_SUFFIXES) or name.endswith(TEMP_FILE_SUFFIX)
        orphan_index = (
            name.endswith(
                (files.INDEX_FILE_SUFFIX, files.TIME_INDEX_FILE_SUFFIX, files.TXN_INDEX_FILE_SUFFIX)
            )
            and name.split(".", 1)[0] not in log_bases
        )
        if stray or orphan_index:
            entry.unlink()
            removed.append(entry)
            logger.info("removed stray file partition=%s file=%s", partition, name)
    return removed


def create_new_log(
    directory: Path,
    config: LogConfig,
    *,
    partition: str,
    clock: Clock,
    file_cache: OpenFileCache | None = None,
) -> LoadedLog:
    """A log in a directory the caller has just created, empty: one segment at offset 0,
    whose ``.index`` and ``.timeindex`` its first append creates."""
    segment = create_segment(
        directory,
        0,
        config,
        clock,
        file_cache=file_cache,
        topic_partition=partition,
        create_index_files=False,
    )
    return LoadedLog(
        segments=[segment],
        log_start_offset=0,
        recovery_point=0,
        log_end_offset=0,
        recovered_segments=0,
        truncated_bytes=0,
    )


def load_log(
    directory: Path,
    config: LogConfig,
    *,
    partition: str,
    log_start_offset_checkpoint: int,
    recovery_point_checkpoint: int,
    had_clean_shutdown: bool,
    leader_epoch_cache: LeaderEpochFileCache,
    clock: Clock,
    file_cache: OpenFileCache | None = None,
) -> LoadedLog:
    """Steps 1-4 of the module docstring. With ``file_cache`` the segments' files join the
    broker's LRU as they are opened, so loading holds at most its size of idle files open."""
    remove_stray_files(directory, partition)
    replay = _ProducerReplay(directory, partition, log_start_offset_checkpoint, clock)
    segments = _open_segments(
        directory,
        config,
        partition,
        clock,
        file_cache,
        check_entries_from=None if had_clean_shutdown else recovery_point_checkpoint,
        replay=replay,
    )
    recovered = 0
    truncated_bytes = 0
    if not had_clean_shutdown and segments:
        recovered, truncated_bytes = _recover_unflushed(
            directory,
            segments,
            recovery_point_checkpoint,
            leader_epoch_cache,
            partition,
            replay=replay,
        )
    if not segments:
        segments.append(
            create_segment(
                directory,
                max(log_start_offset_checkpoint, 0),
                config,
                clock,
                file_cache=file_cache,
                topic_partition=partition,
            )
        )
    active = segments[-1]
    active.set_evictable(False)  # its indexes are preallocated for appends from here on
    active.resize_indexes(config.segment_index_bytes)
    problem = _active_segment_problem(active) if had_clean_shutdown else None
    if problem is not None:
        logger.warning(
            "active segment does not read cleanly after a clean shutdown, recovering it"
            " partition=%s segment=%d problem=%r",
            partition,
            active.base_offset,
            problem,
        )
        more_recovered, more_truncated_bytes = _recover_unflushed(
            directory,
            segments,
            active.base_offset,
            leader_epoch_cache,
            partition,
            replay=replay,
            keep_torn_tail=True,
        )
        recovered += more_recovered
        truncated_bytes += more_truncated_bytes
        had_clean_shutdown = False  # what was validated is flushed below, as after a crash
    log_end_offset = active.read_next_offset()

    if log_end_offset < log_start_offset_checkpoint:
        # Everything local is below the checkpointed start (e.g. deleted by DeleteRecords
        # before a crash): start afresh at the checkpointed log start offset.
        for segment in segments:
            segment.close()
            segment.delete_if_exists()
        segments = [
            create_segment(
                directory,
                log_start_offset_checkpoint,
                config,
                clock,
                file_cache=file_cache,
                topic_partition=partition,
            )
        ]
        leader_epoch_cache.clear_and_flush()
        log_end_offset = log_start_offset_checkpoint

    if config.remote_storage_enable:
        # Kafka's LogLoader: with tiered storage the checkpointed log start offset stands
        # below the first local segment, whose offsets the remote tier serves.
        log_start_offset = max(log_start_offset_checkpoint, 0)
    else:
        log_start_offset = max(log_start_offset_checkpoint, segments[0].base_offset)
    # an epoch that starts at the log end has no data yet: dropped in memory, the file
    # rewritten at the next change (a partition's leader re-assigns it, mostly unchanged)
    leader_epoch_cache.truncate_from_end(log_end_offset, flush=False)
    leader_epoch_cache.truncate_from_start(log_start_offset)
    if had_clean_shutdown:
        recovery_point = min(max(recovery_point_checkpoint, log_start_offset), log_end_offset)
    else:
        # What recovery validated is now made durable, so the recovery point can move to the end.
        for segment in segments:
            segment.flush()
        recovery_point = log_end_offset
    return LoadedLog(
        segments=segments,
        log_start_offset=log_start_offset,
        recovery_point=recovery_point,
        log_end_offset=log_end_offset,
        recovered_segments=recovered,
        truncated_bytes=truncated_bytes,
    )


def _open_segment(
    directory: Path,
    base_offset: int,
    config: LogConfig,
    clock: Clock,
    file_cache: OpenFileCache | None,
    *,
    indexes_absent: bool = False,
) -> LogSegment:
    return LogSegment.open(
        directory,
        base_offset,
        index_interval_bytes=config.index_interval_bytes,
        max_index_size=config.segment_index_bytes,
        roll_jitter_ms=config.segment_jitter_ms,
        clock=clock,
        file_cache=file_cache,
        indexes_absent=indexes_absent,
    )


def _open_segments(
    directory: Path,
    config: LogConfig,
    partition: str,
    clock: Clock,
    file_cache: OpenFileCache | None,
    *,
    check_entries_from: int | None,
    replay: _ProducerReplay,
) -> list[LogSegment]:
    """Step 2: open each ``.log`` with its indexes, rebuilding indexes that fail their check.

    The entries of an index are checked (which maps it) for the last segment and, with
    ``check_entries_from`` (the recovery point after an unclean shutdown), for the segments
    holding offsets at or above it; the others only by their file length."""
    base_offsets = sorted(
        files.offset_from_file_name(entry.name)
        for entry in directory.iterdir()
        if entry.name.endswith(files.LOG_FILE_SUFFIX) and _is_segment_name(entry.name)
    )
    segments: list[LogSegment] = []
    for i, base_offset in enumerate(base_offsets):
        next_base = base_offsets[i + 1] if i + 1 < len(base_offsets) else None
        check_entries = next_base is None or (
            check_entries_from is not None and next_base > check_entries_from
        )
        offset_index_exists = files.offset_index_file(directory, base_offset).exists()
        time_index_exists = files.time_index_file(directory, base_offset).exists()
        # a new log's first segment before its first append: its append creates them
        absent = (
            next_base is None
            and not offset_index_exists
            and not time_index_exists
            and files.log_file(directory, base_offset).stat().st_size == 0
        )
        index_missing = not absent and not (offset_index_exists and time_index_exists)
        segment = _open_segment(
            directory, base_offset, config, clock, file_cache, indexes_absent=absent
        )
        problem = "missing index file" if index_missing else None
        level = logging.WARNING
        corrupt: list[tuple[LazyOffsetIndex | LazyTimeIndex | TransactionIndex, CorruptIndexError]]
        corrupt = []
        indexes = (segment.offset_index, segment.time_index, segment.txn_index)
        for index in () if index_missing else indexes:
            try:
                if check_entries:
                    index.sanity_check()
                else:
                    index.check_length()
            except CorruptIndexError as exc:
                corrupt.append((index, exc))
        if corrupt and not index_missing:
            problem = str(corrupt[0][1])
            if all(
                not isinstance(index, TransactionIndex) and index.is_untrimmed_preallocation()
                for index, _exc in corrupt
            ):
                # Expected after a crash: the active segment's preallocated index was never
                # trimmed. Real damage (entries out of order) stays a warning.
                problem = "preallocated index not trimmed (unclean shutdown)"
                level = logging.INFO
        if problem is not None:
            logger.log(
                level,
                "rebuilding indexes partition=%s segment=%d reason=%r",
                partition,
                base_offset,
                problem,
            )
            result = segment.recover(replay.state_at([*segments, segment]))
            replay.done()
            if result.truncated_bytes:
                logger.warning(
                    "segment cut while rebuilding indexes partition=%s segment=%d"
                    " valid_bytes=%d cut_bytes=%d reason=%r",
                    partition,
                    base_offset,
                    result.valid_bytes,
                    result.truncated_bytes,
                    result.reason,
                )
        segments.append(segment)
    return segments


def _active_segment_problem(segment: LogSegment) -> str | None:
    """Why the active segment does not read to its end from its last index entry, or None.

    Cheap (only the batch headers after the last index entry are read), so it runs even
    after a clean shutdown, when recovery is otherwise skipped.
    """
    index = segment.offset_index
    last_entry = index.lookup(index.last_offset)
    if last_entry.position > segment.size:
        return (
            f"the last offset index entry (offset {last_entry.offset}) points at byte"
            f" {last_entry.position}, past the end of the {segment.size}-byte file"
        )
    next_offset = segment.base_offset
    try:
        for _position, header in segment.log.batches(last_entry.position):
            next_offset = header.next_offset
    except CorruptRecordError as exc:
        return str(exc)
    if index.entries and index.last_offset >= next_offset:
        return (
            f"the offset index ends at offset {index.last_offset}, at or past the end of the"
            f" log ({next_offset})"
        )
    return None


def _is_segment_name(name: str) -> bool:
    try:
        files.offset_from_file_name(name)
    except ValueError:
        return False
    return name.count(".") == 1


def _recover_unflushed(
    directory: Path,
    segments: list[LogSegment],
    recovery_point: int,
    leader_epoch_cache: LeaderEpochFileCache,
    partition: str,
    *,
    replay: _ProducerReplay,
    keep_torn_tail: bool = False,
) -> tuple[int, int]:
    """Step 3: validate segments from the one holding the recovery point; cut at first damage.

    One producer state, replayed to the first segment's base offset, follows the segments
    (each recovered segment leaves it at the next one's base offset) and is snapshotted at
    the end, so that the log's own load need not replay them again.
    With ``keep_torn_tail`` even an incomplete last batch is copied aside before the cut.
    """
    first = 0
    for i, segment in enumerate(segments):
        if segment.base_offset <= recovery_point:
            first = i
    recovered = 0
    truncated_bytes = 0
    producer_state = replay.state_at(segments[: first + 1])
    i = first
    while i < len(segments):
        segment = segments[i]
        size_before = segment.size
        result = _recover_segment_keeping_cut_bytes(
            segment, producer_state, leader_epoch_cache, keep_torn_tail=keep_torn_tail
        )
        recovered += 1
        truncated_bytes += result.truncated_bytes
        if result.truncated_bytes:
            logger.warning(
                "log cut during recovery partition=%s segment=%d valid_bytes=%d of=%d"
                " torn_tail=%s reason=%r",
                partition,
                segment.base_offset,
                result.valid_bytes,
                size_before,
                result.torn_tail,
                result.reason,
            )
            for later in segments[i + 1 :]:
                truncated_bytes += later.size
                _quarantine_segment(directory, later, partition)
            del segments[i + 1 :]
            break
        i += 1
    replay.done()
    return recovered, truncated_bytes


def _recover_segment_keeping_cut_bytes(
    segment: LogSegment,
    producer_state: ProducerStateManager,
    leader_epoch_cache: LeaderEpochFileCache,
    *,
    keep_torn_tail: bool,
) -> RecoveryResult:
    """Recover a segment; bytes to be cut that are more than a torn tail are copied aside."""

    def keep_cut_bytes(result: RecoveryResult) -> None:
        if result.torn_tail and not keep_torn_tail:
            return
        target = segment.path.with_name(
            f"{segment.path.name}.at-{result.valid_bytes}{files.QUARANTINED_FILE_SUFFIX}"
        )
        with open(target, "wb") as out:
            position = result.valid_bytes
            while position < segment.size:
                chunk = segment.log.read(position, min(1 << 20, segment.size - position))
                if not chunk:
                    break
                out.write(chunk)
                position += len(chunk)
            out.flush()
            os.fsync(out.fileno())
        logger.warning("quarantined cut bytes file=%s", target.name)

    return segment.recover(producer_state, leader_epoch_cache, before_cut=keep_cut_bytes)


def _quarantine_segment(directory: Path, segment: LogSegment, partition: str) -> None:
    """Set a whole later segment aside as ``<base>.log.quarantined``; drop its indexes."""
    segment.close()
    target = segment.path.with_name(segment.path.name + files.QUARANTINED_FILE_SUFFIX)
    os.replace(segment.path, target)
    segment.offset_index.delete_if_exists()
    segment.time_index.delete_if_exists()
    segment.txn_index.delete_if_exists()
    logger.warning(
        "quarantined segment after a cut partition=%s file=%s dir=%s",
        partition,
        target.name,
        directory,
    )


class _ProducerReplay:
    """The producer state a segment's recovery starts from (Kafka's ``recoverSegment``): a
    fresh ``ProducerStateManager`` replayed over the segments before it. ``done`` snapshots
    the state reached, so that a later replay (or the log's own load) starts there."""

    def __init__(
        self, directory: Path, partition: str, log_start_offset_checkpoint: int, clock: Clock
    ) -> None:
        self._directory = directory
        self._partition = partition
        self._log_start_offset = max(log_start_offset_checkpoint, 0)
        self._clock = clock
        self._state: ProducerStateManager | None = None

    def state_at(self, segments: list[LogSegment]) -> ProducerStateManager:
        """The state at the base offset of the last of ``segments`` (in order)."""
        state = ProducerStateManager(self._directory, self._partition)
        rebuild_producer_state(
            state,
            LogSegments.viewing(segments),
            log_start_offset=self._log_start_offset,
            last_offset=segments[-1].base_offset,
            now_ms=self._clock.milliseconds(),
        )
        self._state = state
        return state

    def done(self) -> None:
        if self._state is not None:
            self._state.take_snapshot()
            self._state = None


# The epoch cache's lines keep the logger name they had in log.py.
_log_logger = logging.getLogger("storage_core.log.log")


def open_leader_epoch_cache(
    directory: Path, topic_partition: TopicPartition, *, new_log: bool = False
) -> tuple[LeaderEpochFileCache, bool]:
    """The epoch cache; a corrupt checkpoint is set aside and rebuilt from the batches
    (Kafka's ``UnifiedLog.initializeLeaderEpochCache``). True when it must be rebuilt.
    ``new_log``: ``directory`` was just created, there is no checkpoint to read.

    Every batch header carries its partition leader epoch, so the cache can always be
    recomputed; refusing to open the partition would be worse than rebuilding it.
    """
    path = directory / LEADER_EPOCH_CHECKPOINT_FILENAME
    if new_log:
        checkpoint = LeaderEpochCheckpointFile(path)
        return LeaderEpochFileCache(topic_partition, checkpoint, no_file=True), False
    try:
        return LeaderEpochFileCache(topic_partition, LeaderEpochCheckpointFile(path)), False
    except CorruptCheckpointError as exc:
        kept = path.with_name(path.name + files.QUARANTINED_FILE_SUFFIX)
        os.replace(path, kept)
        _log_logger.error(
            "corrupt leader-epoch-checkpoint set aside, rebuilding from batches"
            " partition=%s kept_as=%s error=%s",
            topic_partition,
            kept.name,
            exc,
        )
        return (
            LeaderEpochFileCache(topic_partition, LeaderEpochCheckpointFile(path)),
            True,
        )


def rebuild_leader_epoch_cache(
    cache: LeaderEpochFileCache, segments: Iterable[LogSegment], log_start_offset: int
) -> None:
    """Assign every epoch the segments' batch headers start, from scratch."""
    cache.clear_and_flush()
    for segment in segments:
        for _position, header in segment.log.batches(0):
            epoch = header.partition_leader_epoch
            latest = cache.latest_epoch
            if epoch >= 0 and (latest is None or epoch > latest):
                cache.assign(epoch, header.base_offset)
    cache.truncate_from_start(log_start_offset)
