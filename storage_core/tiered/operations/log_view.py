"""``LogView``: a read-only snapshot of one partition directory, for tiering from outside.

The tiering operations run in processes that only read a broker's log dir (never write
there). ``LogView.read`` takes what they need from the files Kafka's layout defines, opening
every file read-only and writing nothing::

    <log dir>/replication-offset-checkpoint    high watermark        (HW, = LSO here)
    <log dir>/log-start-offset-checkpoint      log start offset
    <log dir>/<topic>-<partition>/
        <base offset>.log / .index / .timeindex / .txnindex      segments (the last is active)
        <offset>.snapshot                                         producer snapshots
        leader-epoch-checkpoint                                   epoch entries
        partition.metadata                                        topic id

Facts per segment: base offset, the next segment's base offset (exclusive end; ``None`` for
the active segment), ``.log`` size, and for closed segments the largest record timestamp
(last entry of the time index, or the ``.log`` mtime when no record has a timestamp, as
Kafka's ``LogSegment.largestTimestamp``). The log end offset comes from a scan of the active
segment's batch headers, stopping at a torn tail (a batch still being written).

A view is a snapshot: the broker keeps appending, rolling and deleting. Every decision made
from a view is therefore conservative about what happened after it was taken (the HW and the
LEO only grow on a leader; segments below the view's start may be gone). Reading retries a
bounded number of times when files vanish under it, then raises
``PartitionDirChangedError``.

Thread-safety: a ``LogView`` is immutable; ``read`` may run in any thread.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from storage_core.common import TopicIdPartition, TopicPartition, Uuid
from storage_core.errors import CorruptRecordError
from storage_core.log import log_file_utils as files
from storage_core.log.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    OffsetCheckpointFile,
)
from storage_core.log.leader_epoch_cache import (
    LEADER_EPOCH_CHECKPOINT_FILENAME,
    EpochEntry,
    LeaderEpochCheckpointFile,
)
from storage_core.log.partition_metadata import PARTITION_METADATA_FILENAME, PartitionMetadataFile
from storage_core.log.time_index import TIME_INDEX_ENTRY, TimeIndex
from storage_core.log.transaction_index import AbortedTxn, read_aborted_txns
from storage_core.records import FileRecords
from storage_core.records.record import NO_TIMESTAMP
from storage_core.tiered.operations.errors import PartitionDirChangedError

logger = logging.getLogger(__name__)

# How many times ``LogView.read`` starts over when a file vanishes while it reads, or a
# segment's roll is not over; the pause before each new attempt grows by this much.
READ_ATTEMPTS_MAX = 3
READ_RETRY_PAUSE_S = 0.05


@dataclass(frozen=True, slots=True, kw_only=True)
class SegmentView:
    """One segment of a ``LogView``.

    ``next_base_offset`` is the base offset of the following segment (the exclusive end of
    this one), ``None`` for the active segment. ``max_timestamp_ms`` is ``None`` for the
    active segment (it still grows).
    """

    directory: Path
    base_offset: int
    next_base_offset: int | None
    size_bytes: int
    max_timestamp_ms: int | None

    def __post_init__(self) -> None:
        if self.base_offset < 0:
            raise ValueError(f"segment base offset must be >= 0, got {self.base_offset}")
        if self.next_base_offset is not None and self.next_base_offset <= self.base_offset:
            raise ValueError(
                f"segment {self.base_offset}: next base offset {self.next_base_offset} is not"
                " above its base offset"
            )

    @property
    def is_active(self) -> bool:
        return self.next_base_offset is None

    @property
    def end_offset(self) -> int:
        """Last offset of a closed segment (inclusive): the next base offset - 1 (Kafka's
        RLM uses the same bound). ``ValueError`` for the active segment."""
        if self.next_base_offset is None:
            raise ValueError(f"active segment {self.base_offset} has no end offset yet")
        return self.next_base_offset - 1

    @property
    def log_path(self) -> Path:
        return files.log_file(self.directory, self.base_offset)

    @property
    def offset_index_path(self) -> Path:
        return files.offset_index_file(self.directory, self.base_offset)

    @property
    def time_index_path(self) -> Path:
        return files.time_index_file(self.directory, self.base_offset)

    @property
    def transaction_index_path(self) -> Path:
        return self.directory / (
            files.filename_prefix_from_offset(self.base_offset) + files.TXN_INDEX_FILE_SUFFIX
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class LogView:
    """What the tiering operations know about one partition (see the module docstring).

    Offsets: ``log_start_offset`` (inclusive) <= ``last_stable_offset`` (exclusive) <=
    ``high_watermark`` (exclusive) <= ``log_end_offset`` (exclusive); ``epoch_entries``
    are the ``leader-epoch-checkpoint`` entries, oldest first; ``producer_snapshots`` maps
    a snapshot's offset to its file.
    """

    directory: Path
    topic_partition: TopicPartition
    topic_id: Uuid | None
    segments: tuple[SegmentView, ...]
    epoch_entries: tuple[EpochEntry, ...]
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    producer_snapshots: Mapping[int, Path] = field(default_factory=dict)
    last_stable_offset: int | None = None
    """Kafka's LSO (exclusive): the leader's, learnt as the HW is; ``None`` builds the view
    with the HW (a log without open transactions)."""
    _aborted_txns: list[tuple[AbortedTxn, ...]] = field(
        default_factory=list, init=False, compare=False, repr=False
    )  # every segment's .txnindex entries, read on first use (not carried by ``replace``)

    def __post_init__(self) -> None:
        if not self.segments:
            raise ValueError(f"partition {self.topic_partition} has no segment")
        if not self.log_start_offset <= self.high_watermark <= self.log_end_offset:
            raise ValueError(
                f"partition {self.topic_partition}: offsets out of order: log start offset"
                f" {self.log_start_offset}, high watermark {self.high_watermark}, log end"
                f" offset {self.log_end_offset}"
            )
        if self.last_stable_offset is None:
            object.__setattr__(self, "last_stable_offset", self.high_watermark)
        elif not self.log_start_offset <= self.last_stable_offset <= self.high_watermark:
            raise ValueError(
                f"partition {self.topic_partition}: last stable offset"
                f" {self.last_stable_offset} is outside [log start offset"
                f" {self.log_start_offset}, high watermark {self.high_watermark}]"
            )

    # ------------------------------------------------------------------ facts
    @property
    def topic_id_partition(self) -> TopicIdPartition:
        """The partition with its topic id; ``ValueError`` if ``partition.metadata`` is absent."""
        if self.topic_id is None:
            raise ValueError(
                f"partition {self.topic_partition} has no partition.metadata (topic id) in"
                f" {self.directory}; its remote data cannot be named"
            )
        return TopicIdPartition(self.topic_id, self.topic_partition)

    @property
    def local_log_start_offset(self) -> int:
        """First offset held locally (inclusive)."""
        return max(self.log_start_offset, self.segments[0].base_offset)

    @property
    def stable_offset(self) -> int:
        """``last_stable_offset`` as an int (it is set by ``__post_init__``)."""
        lso = self.last_stable_offset
        return self.high_watermark if lso is None else lso

    @property
    def latest_epoch(self) -> int | None:
        return self.epoch_entries[-1].epoch if self.epoch_entries else None

    def segment(self, base_offset: int) -> SegmentView | None:
        for segment in self.segments:
            if segment.base_offset == base_offset:
                return segment
        return None

    def aborted_txns_past(self, segment: SegmentView) -> tuple[AbortedTxn, ...]:
        """The aborted transactions with records in closed ``segment`` whose ABORT markers
        lie beyond its end (first offset <= its end < last offset), from the later segments'
        ``.txnindex`` files, where Kafka indexes a transaction with its marker. Once the
        segment lies below the LSO every transaction in it is decided, so these markers are
        in this log. A copy records them: a log restored up to ``segment`` lacks the markers.
        The files are read once per view (a copy backlog asks for every segment)."""
        end = segment.end_offset
        if not self._aborted_txns:
            self._aborted_txns.append(
                tuple(
                    txn
                    for each in self.segments
                    for txn in read_aborted_txns(each.transaction_index_path)
                )
            )
        return tuple(
            txn for txn in self._aborted_txns[0] if txn.first_offset <= end < txn.last_offset
        )

    def producer_snapshot(self, offset: int) -> Path | None:
        """The producer snapshot at exactly ``offset``, if present."""
        return self.producer_snapshots.get(offset)

    # ------------------------------------------------------------------ reading
    @staticmethod
    def read(
        partition_dir: Path,
        *,
        high_watermark: int | None = None,
        log_start_offset: int | None = None,
        last_stable_offset: int | None = None,
    ) -> LogView:
        """Read ``partition_dir`` without writing anything.

        ``high_watermark`` / ``log_start_offset`` default to the log dir's
        ``replication-offset-checkpoint`` / ``log-start-offset-checkpoint`` entries; a missing
        HW entry means nothing is known to be committed (HW = log start offset), a missing
        log start offset entry means the first segment's base offset. The HW is clamped to
        ``[log start offset, log end offset]``. ``last_stable_offset`` is the leader's LSO,
        clamped to ``[log start offset, HW]``; without it the HW stands in for it (no file
        holds the LSO): a view that plans copies is given the leader's.
        """
        partition_dir = Path(partition_dir)
        last_error: OSError | None = None
        for attempt in range(READ_ATTEMPTS_MAX):
            if attempt > 0:
                _pause_before_reading_again(attempt)
            try:
                return _read_once(
                    partition_dir,
                    high_watermark=high_watermark,
                    log_start_offset=log_start_offset,
                    last_stable_offset=last_stable_offset,
                )
            except (FileNotFoundError, IndexChangedError) as exc:  # changed under us
                last_error = exc
        raise PartitionDirChangedError(
            f"partition dir {partition_dir} changed during {READ_ATTEMPTS_MAX} reads"
            f" (last: {last_error}); retry later"
        )


def _read_once(
    partition_dir: Path,
    *,
    high_watermark: int | None,
    log_start_offset: int | None,
    last_stable_offset: int | None = None,
) -> LogView:
    topic_partition = TopicPartition.parse_dir_name(partition_dir.name)
    base_offsets = _segment_base_offsets(partition_dir)
    if not base_offsets:
        raise PartitionDirChangedError(
            f"partition dir {partition_dir} holds no segment; it was deleted or never written"
        )
    segments: list[SegmentView] = []
    for i, base_offset in enumerate(base_offsets):
        next_base = base_offsets[i + 1] if i + 1 < len(base_offsets) else None
        log_path = files.log_file(partition_dir, base_offset)
        segments.append(
            SegmentView(
                directory=partition_dir,
                base_offset=base_offset,
                next_base_offset=next_base,
                size_bytes=log_path.stat().st_size,
                max_timestamp_ms=None
                if next_base is None
                else _largest_timestamp(partition_dir, base_offset),
            )
        )
    log_end_offset = _log_end_offset(segments[-1])
    epochs = LeaderEpochCheckpointFile(partition_dir / LEADER_EPOCH_CHECKPOINT_FILENAME).read()
    metadata_file = PartitionMetadataFile(partition_dir / PARTITION_METADATA_FILENAME)
    topic_id = metadata_file.read() if metadata_file.exists() else None
    log_dir = partition_dir.parent
    if log_start_offset is None:
        log_start_offset = _checkpointed_offset(
            log_dir / LOG_START_OFFSET_CHECKPOINT, topic_partition
        )
    if log_start_offset is None:
        log_start_offset = segments[0].base_offset
    if high_watermark is None:
        high_watermark = _checkpointed_offset(
            log_dir / REPLICATION_OFFSET_CHECKPOINT, topic_partition
        )
    if high_watermark is None:
        high_watermark = log_start_offset
    log_end_offset = max(log_end_offset, log_start_offset)
    high_watermark = min(max(high_watermark, log_start_offset), log_end_offset)
    if last_stable_offset is not None:
        last_stable_offset = min(max(last_stable_offset, log_start_offset), high_watermark)
    snapshots = {
        offset: path
        for offset, path in _producer_snapshots(partition_dir).items()
        if offset >= segments[0].base_offset
    }
    return LogView(
        directory=partition_dir,
        topic_partition=topic_partition,
        topic_id=topic_id,
        segments=tuple(segments),
        epoch_entries=tuple(epochs),
        log_start_offset=log_start_offset,
        log_end_offset=log_end_offset,
        high_watermark=high_watermark,
        producer_snapshots=snapshots,
        last_stable_offset=last_stable_offset,
    )


def _segment_base_offsets(partition_dir: Path) -> list[int]:
    """Base offsets of the ``<20 digits>.log`` files (not ``.deleted``/``.swap``...)."""
    offsets = []
    for name in os.listdir(partition_dir):
        if not name.endswith(files.LOG_FILE_SUFFIX) or name.count(".") != 1:
            continue
        try:
            offsets.append(files.offset_from_file_name(name))
        except ValueError:
            continue
    return sorted(offsets)


class IndexChangedError(OSError):
    """A closed segment's time index is not final: it shrank while it was read, or it is
    still preallocated (the broker creates the next segment before it writes the last entry
    and trims the index), so the view is read again."""


def _pause_before_reading_again(attempt: int) -> None:
    """Long enough for a roll under way to finish (it trims the indexes right after it
    creates the next segment)."""
    time.sleep(READ_RETRY_PAUSE_S * attempt)


def _last_time_index_timestamp(path: Path) -> int:
    """The timestamp of the last entry of the time index at ``path`` (``NO_TIMESTAMP`` when
    empty), read with one ``pread``, never mapped: the broker trims a rolled segment's index,
    and a mapping of the bytes cut off faults with SIGBUS when read. ``IndexChangedError``
    for a file that shrank between its size and the read, and for one still preallocated:
    its last slot is zeros, which no entry after the first can be (timestamps increase). Read
    as an entry, it gave the segment a largest timestamp of 0, so time-based retention would
    have taken its remote copy for the oldest data there is."""
    entry_size = TimeIndex.entry_size
    with open(path, "rb") as f:
        entries = os.fstat(f.fileno()).st_size // entry_size
        if entries == 0:
            return NO_TIMESTAMP
        last = os.pread(f.fileno(), entry_size, (entries - 1) * entry_size)
    if len(last) != entry_size:
        raise IndexChangedError(f"{path} changed while it was read: it shrank")
    if entries > 1 and last == bytes(entry_size):
        raise IndexChangedError(f"{path} is still preallocated: the broker is rolling its segment")
    timestamp, _relative_offset = TIME_INDEX_ENTRY.unpack(last)
    return int(timestamp)


def _largest_timestamp(partition_dir: Path, base_offset: int) -> int:
    """Kafka's ``LogSegment.largestTimestamp`` of a closed segment, read-only."""
    timestamp = _last_time_index_timestamp(files.time_index_file(partition_dir, base_offset))
    if timestamp >= 0 and timestamp != NO_TIMESTAMP:
        return timestamp
    return os.stat(files.log_file(partition_dir, base_offset)).st_mtime_ns // 1_000_000


def _log_end_offset(active: SegmentView) -> int:
    """Last offset + 1 of the active segment's last complete batch (its base if empty)."""
    log_end_offset = active.base_offset
    with FileRecords.open(active.log_path, mutable=False) as records:
        try:
            for _position, header in records.batches(0):
                log_end_offset = header.last_offset + 1
        except CorruptRecordError:
            pass  # a torn tail: the broker is writing that batch right now
    return log_end_offset


def _checkpointed_offset(path: Path, topic_partition: TopicPartition) -> int | None:
    return OffsetCheckpointFile(path).read().get(topic_partition)


def _producer_snapshots(partition_dir: Path) -> dict[int, Path]:
    found = {}
    for name in os.listdir(partition_dir):
        if not name.endswith(files.PRODUCER_SNAPSHOT_FILE_SUFFIX) or name.count(".") != 1:
            continue
        try:
            found[files.offset_from_file_name(name)] = partition_dir / name
        except ValueError:
            continue
    return found
