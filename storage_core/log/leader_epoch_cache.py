"""Leader epochs of a partition and their start offsets (Kafka's ``LeaderEpochFileCache``).

File ``leader-epoch-checkpoint`` in the partition directory, in the checkpoint format of
``checkpoints`` with ``<epoch> <start offset>`` entries, oldest first::

    0
    3
    0 0
    2 120
    5 388

An entry ``(e, s)`` says that the leader of epoch ``e`` wrote its first record at offset
``s``; the epoch covers offsets ``[s, start of the next entry)`` (the last one up to the log
end offset). After every operation of the cache both epochs and start offsets strictly
increase from entry to entry.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from storage_core.common import TopicPartition
from storage_core.errors import CorruptCheckpointError
from storage_core.log.checkpoints import (
    CHECKPOINT_VERSION,
    INT32_MAX,
    INT64_MAX,
    CheckpointFile,
    parse_int,
    split_fields,
)

logger = logging.getLogger(__name__)

LEADER_EPOCH_CHECKPOINT_FILENAME = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


@dataclass(frozen=True, slots=True, order=True)
class EpochEntry:
    """A leader epoch and the first offset written in it."""

    epoch: int
    start_offset: int


_EntryPredicate = Callable[[EpochEntry], bool]


def _entry_to_line(entry: EpochEntry) -> str:
    if not 0 <= entry.epoch <= INT32_MAX or not 0 <= entry.start_offset <= INT64_MAX:
        raise ValueError(
            f"epoch entry {entry} cannot be written: the epoch must be a non-negative int32"
            " and the start offset a non-negative int64"
        )
    return f"{entry.epoch} {entry.start_offset}"


def _entry_from_line(line: str) -> EpochEntry:
    epoch, start_offset = split_fields(line, 2, "<epoch> <start offset>")
    return EpochEntry(
        parse_int(epoch, 0, INT32_MAX, "an epoch"),
        parse_int(start_offset, 0, INT64_MAX, "a start offset"),
    )


class LeaderEpochCheckpointFile:
    """The ``leader-epoch-checkpoint`` file: ``0\\n<N>\\n<epoch> <start offset>\\n...``.

    ``read`` gives ``[]`` for a missing file and raises ``CorruptCheckpointError`` (naming
    the file and line) for a malformed one, including negative epochs or offsets. ``write``
    replaces the file atomically.

    Thread safety: ``read`` and ``write`` hold a lock per instance.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._checkpoint: CheckpointFile[EpochEntry] = CheckpointFile(
            path, CHECKPOINT_VERSION, _entry_to_line, _entry_from_line
        )

    def write(self, entries: Sequence[EpochEntry]) -> None:
        self._checkpoint.write(entries)

    def read(self) -> list[EpochEntry]:
        return self._checkpoint.read()


def parse_leader_epoch_checkpoint(data: bytes, *, source: str) -> list[EpochEntry]:
    """The entries of a ``leader-epoch-checkpoint`` held in memory (e.g. the LEADER_EPOCH
    object of a remote segment), checked as the file would be: ``CorruptCheckpointError``
    naming ``source`` for bad bytes, a bad line, or entries whose epochs or start offsets
    do not strictly increase."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptCheckpointError(
            f"Checkpoint {source} is not valid UTF-8 at byte {exc.start}"
        ) from exc
    parser: CheckpointFile[EpochEntry] = CheckpointFile(
        Path(source), CHECKPOINT_VERSION, _entry_to_line, _entry_from_line
    )
    entries = parser.parse(text)
    for previous, entry in itertools.pairwise(entries):
        if entry.epoch <= previous.epoch or entry.start_offset <= previous.start_offset:
            raise CorruptCheckpointError(
                f"Checkpoint {source}: entry {entry} does not follow {previous} (epochs and"
                " start offsets must strictly increase)"
            )
    return entries


class LeaderEpochFileCache:
    """The epochs of one partition, in memory and in its checkpoint (format above).

    Invariant: epochs and start offsets both strictly increase along ``epoch_entries()``.
    ``assign`` keeps it by first removing, from the end, every entry that the new entry
    contradicts (an epoch or start offset not below the new one). Entries loaded from the
    checkpoint go through the same rule. Every change is written to the checkpoint before
    the method returns, except a truncation asked with ``flush=False`` (the log loader's, as
    Kafka's loader truncates with an asynchronous flush): the file may then hold entries past
    the log end until the next write, which every load removes again, and never lacks one.
    A write that would leave the file as it is (what was read or last written) is skipped,
    so a restarted leader re-assigning the epoch it had costs no fsync.

    Thread safety: every method holds one re-entrant lock, so the cache may be used from the
    append path, the replica fetchers and retention concurrently.
    """

    def __init__(
        self,
        topic_partition: TopicPartition,
        checkpoint: LeaderEpochCheckpointFile,
        *,
        no_file: bool = False,
    ) -> None:
        """``no_file``: the checkpoint is known not to exist (a directory just created), so
        it is not looked for."""
        self.topic_partition = topic_partition
        self.checkpoint = checkpoint
        self._lock = threading.RLock()
        self._epochs: list[EpochEntry] = []
        stored = [] if no_file else checkpoint.read()
        for entry in stored:
            self._assign(entry)
        # the entries the file holds, None while it does not exist
        self._written: list[EpochEntry] | None = (
            None if no_file or not checkpoint.path.exists() else stored
        )

    # ------------------------------------------------------------------ changes
    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset`` (Kafka's ``assign``).

        ``ValueError`` if either is negative. Nothing changes if ``epoch`` is the latest
        epoch and ``start_offset`` is not below its start offset.
        """
        entry = EpochEntry(epoch, start_offset)
        with self._lock:
            if self._assign(entry):
                logger.debug(
                    "appended epoch entry partition=%s epoch=%d start_offset=%d entries=%d",
                    self.topic_partition,
                    epoch,
                    start_offset,
                    len(self._epochs),
                )
                self.flush()

    def _is_update_needed(self, entry: EpochEntry) -> bool:
        latest = self._epochs[-1] if self._epochs else None
        return (
            latest is None
            or entry.epoch != latest.epoch
            or entry.start_offset < latest.start_offset
        )

    def _assign(self, entry: EpochEntry) -> bool:
        if entry.epoch < 0 or entry.start_offset < 0:
            raise ValueError(
                f"Received invalid partition leader epoch entry {entry} for partition"
                f" {self.topic_partition}: epoch and start offset must be >= 0"
            )
        if not self._is_update_needed(entry):
            return False
        removed = self._remove_from_end(
            lambda e: e.epoch >= entry.epoch or e.start_offset >= entry.start_offset
        )
        if len(removed) > 1 or (removed and removed[0].start_offset != entry.start_offset):
            # A single entry replaced at the same start offset wrote no data: expected.
            logger.warning(
                "new epoch entry truncated conflicting entries partition=%s epoch=%d"
                " start_offset=%d removed=%s entries=%d",
                self.topic_partition,
                entry.epoch,
                entry.start_offset,
                [(e.epoch, e.start_offset) for e in removed],
                len(self._epochs),
            )
        self._epochs.append(entry)
        return True

    def _remove_from_end(self, matches: _EntryPredicate) -> list[EpochEntry]:
        """Pop entries from the end while they match; returned oldest first."""
        removed: list[EpochEntry] = []
        while self._epochs and matches(self._epochs[-1]):
            removed.append(self._epochs.pop())
        removed.reverse()
        return removed

    def truncate_from_end(self, end_offset: int, *, flush: bool = True) -> None:
        """Remove the entries with ``start_offset >= end_offset`` (the log was cut there).

        Nothing happens for a negative ``end_offset`` or if the latest entry starts below it.
        ``flush=False`` leaves the file to the next write (see the class docstring).
        """
        with self._lock:
            if end_offset < 0 or not self._epochs or self._epochs[-1].start_offset < end_offset:
                return
            removed = self._remove_from_end(lambda e: e.start_offset >= end_offset)
            if flush:
                self.flush()
            logger.debug(
                "truncated epochs from end partition=%s end_offset=%d removed=%d entries=%d",
                self.topic_partition,
                end_offset,
                len(removed),
                len(self._epochs),
            )

    def truncate_from_start(self, start_offset: int) -> None:
        """Forget offsets below ``start_offset`` (the log start offset moved up).

        Removes the entries with ``start_offset <= start_offset``; the epoch of the last one
        removed covers ``start_offset`` and is put back starting there.
        """
        with self._lock:
            count = bisect.bisect_right(self._epochs, start_offset, key=lambda e: e.start_offset)
            if count == 0 or (count == 1 and self._epochs[0].start_offset == start_offset):
                return  # nothing below it: the checkpoint stays as written (no fsync per load)
            last_removed = self._epochs[count - 1]
            self._epochs[:count] = [EpochEntry(last_removed.epoch, start_offset)]
            self.flush()
            logger.debug(
                "truncated epochs from start partition=%s start_offset=%d removed=%d entries=%d",
                self.topic_partition,
                start_offset,
                count,
                len(self._epochs),
            )

    def clear_and_flush(self) -> None:
        """Forget every epoch and write the empty checkpoint."""
        with self._lock:
            self._epochs.clear()
            self.flush()

    def flush(self) -> None:
        """Write the entries to the checkpoint file (atomically), unless it holds them."""
        with self._lock:
            if self._written == self._epochs:
                return
            self.checkpoint.write(self._epochs)
            self._written = list(self._epochs)

    # ------------------------------------------------------------------ queries
    def epoch_entries(self) -> list[EpochEntry]:
        with self._lock:
            return list(self._epochs)

    def latest_entry(self) -> EpochEntry | None:
        with self._lock:
            return self._epochs[-1] if self._epochs else None

    @property
    def latest_epoch(self) -> int | None:
        with self._lock:
            return self._epochs[-1].epoch if self._epochs else None

    def earliest_entry(self) -> EpochEntry | None:
        with self._lock:
            return self._epochs[0] if self._epochs else None

    def epoch_entry(self, epoch: int) -> EpochEntry | None:
        """The entry of exactly ``epoch``, if known."""
        with self._lock:
            i = bisect.bisect_left(self._epochs, epoch, key=lambda e: e.epoch)
            if i < len(self._epochs) and self._epochs[i].epoch == epoch:
                return self._epochs[i]
            return None

    def previous_epoch(self, epoch: int) -> int | None:
        """The largest known epoch ``< epoch`` (Kafka's ``previousEpoch(epoch)``)."""
        with self._lock:
            i = bisect.bisect_left(self._epochs, epoch, key=lambda e: e.epoch)
            return self._epochs[i - 1].epoch if i > 0 else None

    def next_epoch(self, epoch: int) -> int | None:
        """The smallest known epoch ``> epoch`` (Kafka's ``nextEpoch``)."""
        with self._lock:
            i = bisect.bisect_right(self._epochs, epoch, key=lambda e: e.epoch)
            return self._epochs[i].epoch if i < len(self._epochs) else None

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch of the entry with the largest ``start_offset <= offset``; None if none."""
        with self._lock:
            i = bisect.bisect_right(self._epochs, offset, key=lambda e: e.start_offset)
            return self._epochs[i - 1].epoch if i > 0 else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """``(epoch, end offset)`` for an OffsetForLeaderEpoch request (Kafka's ``endOffsetFor``);
        see ``end_offset_for_entries``."""
        with self._lock:
            return end_offset_for_entries(self._epochs, requested_epoch, log_end_offset)

    def snapshot_up_to(self, end_offset: int) -> list[EpochEntry]:
        """The entries with ``start_offset < end_offset`` (exclusive), oldest first."""
        with self._lock:
            count = bisect.bisect_left(self._epochs, end_offset, key=lambda e: e.start_offset)
            return self._epochs[:count]

    def write_to(self, path: Path) -> LeaderEpochFileCache:
        """Write the entries to a checkpoint at ``path``; return a cache backed by that file."""
        with self._lock:
            checkpoint = LeaderEpochCheckpointFile(path)
            checkpoint.write(self._epochs)
            return LeaderEpochFileCache(self.topic_partition, checkpoint)

    def __repr__(self) -> str:
        with self._lock:
            entries = ", ".join(f"{e.epoch}@{e.start_offset}" for e in self._epochs)
        return f"LeaderEpochFileCache({self.topic_partition}: [{entries}])"


def end_offset_for_entries(
    entries: Sequence[EpochEntry], requested_epoch: int, log_end_offset: int
) -> tuple[int, int]:
    """``(epoch, end offset)`` of ``requested_epoch`` over ``entries`` (oldest first), as
    Kafka's ``LeaderEpochFileCache.endOffsetFor``:

    * ``UNDEFINED_EPOCH`` requested -> ``(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)``;
    * the latest epoch -> ``(requested_epoch, log_end_offset)``;
    * no known epoch above it -> undefined, as above;
    * no known epoch at or below it -> ``(requested_epoch, start of the next epoch)``;
    * otherwise -> ``(largest known epoch <= requested, start of the next epoch)``.
    """
    if requested_epoch == UNDEFINED_EPOCH:
        return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
    if entries and entries[-1].epoch == requested_epoch:
        return requested_epoch, log_end_offset
    higher = bisect.bisect_right(entries, requested_epoch, key=lambda e: e.epoch)
    if higher == len(entries):
        return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
    higher_start = entries[higher].start_offset
    if higher == 0:
        return requested_epoch, higher_start
    return entries[higher - 1].epoch, higher_start
