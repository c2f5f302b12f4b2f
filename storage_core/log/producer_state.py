"""Idempotent-producer state of one partition (Kafka's ``ProducerStateManager``).

For every producer id seen in the log the partition keeps a ``ProducerStateEntry``: the
producer epoch, the metadata of its last ``NUM_BATCHES_TO_RETAIN`` (5) batches, the epoch of
the last transaction coordinator that wrote a marker for it, and the first offset of its open
transaction. A leader checks every incoming batch against that entry (``ProducerAppendInfo``):
a batch already in the log is answered with its original offsets instead of being written
twice; a stale epoch or a gap in the sequence numbers is refused.

The state is persisted in ``<20-digit offset>.snapshot`` files in the partition directory;
their format is written out in ``producer_snapshot.py``. The pieces sit in Kafka's files:
``producer_state_entry.py`` (``ProducerStateEntry``, ``BatchMetadata``, ``CompletedTxn``),
``producer_append_info.py`` (``ProducerAppendInfo``, ``AppendOrigin``),
``producer_snapshot.py`` (the snapshot file format, ``SnapshotFile``) and this module
(``ProducerStateManager``).

Thread safety: none. ``Log`` calls every method under its own lock.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from storage_core.errors import CorruptSnapshotError
from storage_core.log import log_file_utils as files
from storage_core.log.producer_append_info import AppendOrigin, ProducerAppendInfo
from storage_core.log.producer_snapshot import (
    SnapshotFile,
    list_snapshot_files,
    read_snapshot,
    write_snapshot,
)
from storage_core.log.producer_state_entry import CompletedTxn, ProducerBatch, ProducerStateEntry
from storage_core.log.verification_guard import VerificationStateEntry

logger = logging.getLogger(__name__)

DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000  # producer.id.expiration.ms


class ProducerStateManager:
    """The producer ids of one partition, their state and its snapshot files.

    ``map_end_offset`` is the offset (exclusive) up to which the state reflects the log; the
    ``Log`` moves it after each append. ``take_snapshot`` writes the state at that offset.
    Producers idle for ``producer_id_expiration_ms`` without an open transaction are dropped
    on load and by ``remove_expired_producers``.

    Thread safety: none; the owning ``Log`` serialises every call under its lock.
    """

    def __init__(
        self,
        directory: Path,
        partition: str,
        *,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        new_log: bool = False,
    ) -> None:
        """``new_log``: the directory was just created and holds no snapshot to list."""
        if producer_id_expiration_ms < 1:
            raise ValueError(
                f"producer.id.expiration.ms must be >= 1, got {producer_id_expiration_ms}"
            )
        self.dir = directory
        self.partition = partition
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self._producers: dict[int, ProducerStateEntry] = {}
        # producers waiting for the coordinator's word on a first transactional batch
        # (KIP-890 part 1, ``verification_guard.py``): producer id -> entry
        self._verification_states: dict[int, VerificationStateEntry] = {}
        self._ongoing_txns: dict[int, int] = {}  # first offset -> producer id
        # completed transactions whose marker is above the high watermark: first offset ->
        # last offset (the marker's); they keep the LSO back until the marker is replicated
        self._unreplicated_txns: dict[int, int] = {}
        self.first_unstable_offset: int | None = None
        """First offset of the oldest transaction that is open or whose marker is not yet
        replicated (Kafka's ``firstUnstableOffset``): the LSO cannot pass it. Kept up to date
        by every change, so that readers without the log's lock see a whole value."""
        self._snapshots: dict[int, SnapshotFile] = {} if new_log else self._load_snapshots()
        self._last_map_offset = 0
        self._last_snap_offset = 0

    # ------------------------------------------------------------------ state
    @property
    def active_producers(self) -> Mapping[int, ProducerStateEntry]:
        """A copy of the producer id -> entry map."""
        return dict(self._producers)

    @property
    def producer_id_count(self) -> int:
        return len(self._producers)

    @property
    def is_empty(self) -> bool:
        return not self._producers

    @property
    def map_end_offset(self) -> int:
        """The state reflects every batch below this offset (exclusive)."""
        return self._last_map_offset

    def first_undecided_offset(self) -> int | None:
        """First offset of the oldest open transaction, if any."""
        return min(self._ongoing_txns, default=None)

    def _update_first_unstable_offset(self) -> None:
        self.first_unstable_offset = min(
            self._ongoing_txns.keys() | self._unreplicated_txns.keys(), default=None
        )

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """The LSO once ``completed`` is decided (Kafka's ``lastStableOffset``, stored in its
        aborted-transaction index entry): the first offset of the oldest other open
        transaction, else just past the marker."""
        others = (
            first
            for first, producer_id in self._ongoing_txns.items()
            if producer_id != completed.producer_id
        )
        return min(others, default=completed.last_offset + 1)

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Completed transactions whose marker is below ``high_watermark`` are stable."""
        if self._unreplicated_txns:
            stable = [f for f, last in self._unreplicated_txns.items() if last < high_watermark]
            for first in stable:
                del self._unreplicated_txns[first]
            self._update_first_unstable_offset()

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    def has_ongoing_transaction(self, producer_id: int) -> bool:
        entry = self._producers.get(producer_id)
        return entry is not None and entry.current_txn_first_offset is not None

    def maybe_create_verification_state_entry(
        self, producer_id: int, sequence: int, epoch: int, now_ms: int
    ) -> VerificationStateEntry:
        """The producer's verification entry, created now if it has none; its lowest
        sequence and epoch take ``sequence`` and ``epoch`` into account (Kafka's
        ``maybeCreateVerificationStateEntry``)."""
        entry = self._verification_states.get(producer_id)
        if entry is None:
            entry = VerificationStateEntry.create(now_ms, sequence, epoch)
        else:
            entry = entry.with_lowest_sequence_and_epoch(sequence, epoch)
        self._verification_states[producer_id] = entry
        return entry

    def verification_state_entry(self, producer_id: int) -> VerificationStateEntry | None:
        return self._verification_states.get(producer_id)

    def clear_verification_state_entry(self, producer_id: int) -> None:
        self._verification_states.pop(producer_id, None)

    def prepare_update(self, producer_id: int, origin: AppendOrigin) -> ProducerAppendInfo:
        current = self._producers.get(producer_id) or ProducerStateEntry(producer_id=producer_id)
        return ProducerAppendInfo(
            self.partition,
            producer_id,
            current,
            origin,
            self._verification_states.get(producer_id),
        )

    def update(self, append_info: ProducerAppendInfo) -> None:
        """Apply a validated ``ProducerAppendInfo`` whose batches are now in the log. A
        transactional batch or a marker of the producer ends its verification: the
        transaction is open on the partition now, or ended (Kafka's ``updateProducers``)."""
        if append_info.saw_transactional_batch:
            self._verification_states.pop(append_info.producer_id, None)
        update = append_info.to_entry()
        current = self._producers.get(append_info.producer_id)
        self._producers[append_info.producer_id] = (
            update if current is None else current.merged(update)
        )
        for first_offset in append_info.started_transactions:
            self._ongoing_txns[first_offset] = append_info.producer_id
        if append_info.started_transactions:
            self._update_first_unstable_offset()

    def complete_txn(self, completed: CompletedTxn) -> None:
        if self._ongoing_txns.pop(completed.first_offset, None) is not None:
            self._unreplicated_txns[completed.first_offset] = completed.last_offset
            self._update_first_unstable_offset()

    def load_producer_entry(self, entry: ProducerStateEntry) -> None:
        self._producers[entry.producer_id] = entry
        if entry.current_txn_first_offset is not None:
            self._ongoing_txns[entry.current_txn_first_offset] = entry.producer_id
            self._update_first_unstable_offset()

    def update_map_end_offset(self, last_offset: int) -> None:
        self._last_map_offset = last_offset

    def is_producer_expired(self, now_ms: int, entry: ProducerStateEntry) -> bool:
        return (
            entry.current_txn_first_offset is None
            and now_ms - entry.last_timestamp >= self.producer_id_expiration_ms
        )

    def remove_expired_producers(self, now_ms: int) -> int:
        """Drop producers idle for ``producer.id.expiration.ms``, and verification entries
        that old (never verified, or never appended); returns how many producers went."""
        expired = [
            pid for pid, entry in self._producers.items() if self.is_producer_expired(now_ms, entry)
        ]
        for pid in expired:
            del self._producers[pid]
        lingering = [
            pid
            for pid, entry in self._verification_states.items()
            if now_ms - entry.timestamp_ms >= self.producer_id_expiration_ms
        ]
        for pid in lingering:
            del self._verification_states[pid]
        if expired:
            logger.info(
                "expired producer ids partition=%s count=%d remaining=%d",
                self.partition,
                len(expired),
                len(self._producers),
            )
        return len(expired)

    # ------------------------------------------------------------------ snapshots
    def _load_snapshots(self) -> dict[int, SnapshotFile]:
        return {snapshot.offset: snapshot for snapshot in list_snapshot_files(self.dir)}

    def snapshot_files(self) -> list[SnapshotFile]:
        """The snapshot files this manager knows, oldest first."""
        return [self._snapshots[offset] for offset in sorted(self._snapshots)]

    def fetch_snapshot(self, offset: int) -> Path | None:
        """The snapshot file at exactly ``offset`` (tiered storage uploads the one whose offset
        is the next segment's base offset), or None."""
        snapshot = self._snapshots.get(offset)
        return None if snapshot is None else snapshot.path

    @property
    def latest_snapshot_offset(self) -> int | None:
        return max(self._snapshots, default=None)

    @property
    def oldest_snapshot_offset(self) -> int | None:
        return min(self._snapshots, default=None)

    def take_snapshot(self) -> Path | None:
        """Write the state at ``map_end_offset`` unless a snapshot there was already taken."""
        if self._last_map_offset <= self._last_snap_offset:
            return None
        path = files.producer_snapshot_file(self.dir, self._last_map_offset)
        write_snapshot(path, self._producers.values())
        self._snapshots[self._last_map_offset] = SnapshotFile(
            offset=self._last_map_offset, path=path
        )
        self._last_snap_offset = self._last_map_offset
        logger.info(
            "wrote producer snapshot partition=%s offset=%d producers=%d",
            self.partition,
            self._last_map_offset,
            len(self._producers),
        )
        return path

    def _remove_and_delete_snapshot(self, offset: int) -> None:
        snapshot = self._snapshots.pop(offset, None)
        if snapshot is not None:
            snapshot.path.unlink(missing_ok=True)

    def _quarantine_snapshot(self, offset: int, reason: Exception) -> None:
        snapshot = self._snapshots.pop(offset)
        kept = snapshot.path.with_name(snapshot.path.name + files.QUARANTINED_FILE_SUFFIX)
        with contextlib.suppress(FileNotFoundError):
            os.replace(snapshot.path, kept)
        logger.error(
            "corrupt producer snapshot set aside, rebuilding from the log partition=%s"
            " kept_as=%s error=%s",
            self.partition,
            kept.name,
            reason,
        )

    def remove_stray_snapshots(self, segment_base_offsets: Iterable[int]) -> None:
        """Delete snapshots that match no segment base offset, except the newest one if it is
        above every segment (the one written at the log end by a clean shutdown)."""
        base_offsets = set(segment_base_offsets)
        self._snapshots = self._load_snapshots()
        strays = [offset for offset in sorted(self._snapshots) if offset not in base_offsets]
        if not strays:
            return
        keep = strays[-1] if not base_offsets or strays[-1] > max(base_offsets) else None
        for offset in strays:
            if offset != keep:
                self._remove_and_delete_snapshot(offset)

    def delete_snapshots_before(self, offset: int, *, keep_newest_at_or_below: bool) -> None:
        """Delete snapshots below ``offset`` (exclusive); optionally keep the newest one at or
        below it, so that state for a log starting at ``offset`` can still be loaded."""
        doomed = sorted(o for o in self._snapshots if o < offset)
        if keep_newest_at_or_below and doomed and offset not in self._snapshots:
            doomed.pop()
        for snapshot_offset in doomed:
            self._remove_and_delete_snapshot(snapshot_offset)

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        self._last_map_offset = max(self._last_map_offset, log_start_offset)
        latest = self.latest_snapshot_offset
        self._last_snap_offset = log_start_offset if latest is None else latest

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int, now_ms: int) -> None:
        """Forget state above ``log_end_offset`` and reload from the newest valid snapshot.

        Snapshots above the log end go; below the log start only the newest one at or below
        it is kept. (Kafka deletes that one too and so forgets producers whose batches all
        lie before the log start; keeping it keeps them, as the in-memory state does.)
        """
        for offset in [o for o in self._snapshots if o > log_end_offset]:
            self._remove_and_delete_snapshot(offset)
        self.delete_snapshots_before(log_start_offset, keep_newest_at_or_below=True)
        if log_end_offset != self._last_map_offset:
            self._producers.clear()
            self._ongoing_txns.clear()
            self._unreplicated_txns.clear()
            self.first_unstable_offset = None
            self._load_from_snapshot(log_start_offset, now_ms)
        else:
            self.on_log_start_offset_incremented(log_start_offset)

    def _load_from_snapshot(self, log_start_offset: int, now_ms: int) -> None:
        while self._snapshots:
            offset = max(self._snapshots)
            snapshot = self._snapshots[offset]
            try:
                entries = read_snapshot(snapshot.path)
            except CorruptSnapshotError as exc:
                self._quarantine_snapshot(offset, exc)
                continue
            for entry in entries:
                if not self.is_producer_expired(now_ms, entry):
                    self.load_producer_entry(entry)
            logger.info(
                "loaded producer snapshot partition=%s offset=%d producers=%d",
                self.partition,
                offset,
                len(self._producers),
            )
            self._last_snap_offset = offset
            self._last_map_offset = offset
            return
        self._last_snap_offset = log_start_offset
        self._last_map_offset = log_start_offset

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Forget every producer and delete every snapshot; the state restarts at ``offset``."""
        self._producers.clear()
        self._ongoing_txns.clear()
        self._unreplicated_txns.clear()
        self.first_unstable_offset = None
        for snapshot_offset in list(self._snapshots):
            self._remove_and_delete_snapshot(snapshot_offset)
        self._last_snap_offset = 0
        self._last_map_offset = offset

    def reload_snapshots(self) -> None:
        """Forget the state and rescan the directory for snapshot files (e.g. one restored
        from remote storage); ``truncate_and_reload`` then loads the newest."""
        self._producers.clear()
        self._ongoing_txns.clear()
        self._unreplicated_txns.clear()
        self.first_unstable_offset = None
        self._snapshots = self._load_snapshots()
        self._last_snap_offset = 0
        self._last_map_offset = 0

    def update_parent_dir(self, directory: Path) -> None:
        """The partition directory was renamed: follow it."""
        self.dir = directory
        self._snapshots = {
            offset: SnapshotFile(offset=offset, path=directory / snapshot.path.name)
            for offset, snapshot in self._snapshots.items()
        }

    def load_producers_from_batches(self, batches: Iterable[ProducerBatch]) -> None:
        """Replay batches that are already in the log (Kafka's ``loadProducersFromRecords``)."""
        loaded: dict[int, ProducerAppendInfo] = {}
        completed: list[CompletedTxn] = []
        for batch in batches:
            if not batch.has_producer_id:
                continue
            info = loaded.get(batch.producer_id)
            if info is None:
                info = self.prepare_update(batch.producer_id, AppendOrigin.REPLICATION)
                loaded[batch.producer_id] = info
            done = info.append(batch)
            if done is not None:
                completed.append(done)
        for info in loaded.values():
            self.update(info)
        for done in completed:
            self.complete_txn(done)
