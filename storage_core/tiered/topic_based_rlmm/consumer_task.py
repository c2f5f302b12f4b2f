"""``ConsumerTask``: materialises ``__remote_log_metadata`` into one cache per user partition.

Kafka's ``ConsumerTask``. It tracks a set of user partitions; each maps to one metadata
partition (``RemoteLogMetadataTopicPartitioner``), which is *subscribed* while at least one of
its user partitions is tracked. Per subscribed metadata partition it keeps a position (next
offset to read); per tracked user partition a ``RemoteLogMetadataCache`` and
``applied_offset``, the last metadata offset (inclusive) the cache reflects::

    metadata partition 7:  0 1 2 3 4 5 6 7 8 9      position = 10
                           a b a c a . . b a a      (a, b, c: events of user partitions)
    tracked a: applied_offset 9      tracked b: applied_offset 9   (c untracked: skipped)

A round reads each subscribed partition once (at most ``max_records_per_read`` records up to
the high watermark), deserializes every value and applies it to its partition's cache when
that partition is tracked and ``offset > applied_offset``; then every tracked partition of
the metadata partition has ``applied_offset = position - 1``. Adding a user partition whose
restored snapshot is older than the position moves the position back to it; the other
partitions skip what they already applied. So a metadata partition is read from the smallest
of its committed offset + 1 and its tracked partitions' ``applied_offset + 1``.

Events are never fatal: an undecodable value, an event the state machine refuses
(``IllegalRemoteLogStateTransitionError``) or an update of an unknown segment
(``RemoteResourceNotFoundError``) is logged once and skipped, as Kafka does; the refusal is
remembered (bounded) so that the publisher of that offset is told.

A read that finds its position below the metadata partition's log start offset (records
deleted by the topic's compaction) drops the caches of the partitions that had not applied
what was skipped and rebuilds them from the log start (not ready meanwhile).

A user partition is *ready* once its ``applied_offset + 1`` reaches the high watermark its
metadata partition had at the first read after it was tracked; its cache is then marked
initialized.

Restart: ``checkpoint()`` (periodic and on ``close``) first writes a ``remote_log_snapshot``
of every tracked partition whose cache moved since its last snapshot (where
``snapshot_dir_for`` gives a directory), then ``_rlmm_committed_offsets`` (position - 1 per
metadata partition). Tracking a partition restores its cache from its snapshot.

Threading: ``run`` is the body of one dedicated thread (``start``); tests may call
``poll_once`` and ``checkpoint`` directly instead. Every other method may be called from any
thread: state is guarded by ``_lock`` (a ``Condition`` on which waiters for an offset sleep);
reads of the metadata partitions and file writes happen outside it. ``wait_until_applied``
blocks and must not be called on an asyncio loop thread.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from storage_core.common import TopicIdPartition
from storage_core.errors import StorageError
from storage_core.tiered.metadata import serde
from storage_core.tiered.metadata.cache import RemoteLogMetadataCache
from storage_core.tiered.metadata.errors import (
    CorruptRemoteLogMetadataError,
    IllegalRemoteLogStateTransitionError,
    RemoteResourceNotFoundError,
)
from storage_core.tiered.metadata.metadata import RemoteLogSegmentMetadataSnapshot
from storage_core.tiered.metadata.partitioner import RemoteLogMetadataTopicPartitioner
from storage_core.tiered.metadata.snapshot_file import (
    RemoteLogMetadataSnapshotFile,
    Snapshot,
    maybe_restore_cache,
    snapshot_of,
)
from storage_core.tiered.topic_based_rlmm.committed_offsets import CommittedOffsetsFile
from storage_core.tiered.topic_based_rlmm.config import (
    MAX_REMEMBERED_REJECTIONS,
    REMOTE_LOG_METADATA_TOPIC_NAME,
    ConsumerTaskConfig,
)
from storage_core.tiered.topic_based_rlmm.errors import (
    RemoteLogMetadataConsumeTimeoutError,
    RemoteLogMetadataManagerClosedError,
)
from storage_core.tiered.topic_based_rlmm.readers import MetadataPartitionReader, MetadataRead

logger = logging.getLogger(__name__)

SnapshotDirFor = Callable[[TopicIdPartition], Path | None]
"""The directory holding a user partition's ``remote_log_snapshot``; ``None``: no snapshot."""


@dataclass(slots=True)
class _TrackedPartition:
    metadata_partition: int
    cache: RemoteLogMetadataCache
    applied_offset: int  # last metadata offset reflected by the cache (inclusive); -1: none
    snapshot_offset: int  # metadata offset of the snapshot on disk (inclusive); -1: none
    ready_target: int | None = None  # HW to reach; None until the first read after tracking
    ready: bool = False


class ConsumerTask:
    """Tracks user partitions and applies their metadata events; see the module doc."""

    def __init__(
        self,
        reader: MetadataPartitionReader,
        partitioner: RemoteLogMetadataTopicPartitioner,
        *,
        snapshot_dir_for: SnapshotDirFor | None = None,
        committed_offsets_dir: Path | None = None,
        config: ConsumerTaskConfig | None = None,
        hosted_partitions: Callable[[], set[TopicIdPartition]] | None = None,
    ) -> None:
        self._reader = reader
        self.partitioner = partitioner
        self._snapshot_dir_for = snapshot_dir_for
        self.config = config or ConsumerTaskConfig()
        self._hosted_partitions = hosted_partitions
        self._lock = threading.Condition(threading.Lock())
        self._tracked: dict[TopicIdPartition, _TrackedPartition] = {}
        self._positions: dict[int, int] = {}
        # per metadata partition: (reads applied so far, the high watermark of the last one)
        self._reads: dict[int, tuple[int, int]] = {}
        self._rejections: collections.OrderedDict[tuple[int, int], StorageError] = (
            collections.OrderedDict()
        )
        self._hosted_tracked: set[TopicIdPartition] = set()
        self._wakeup = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._last_checkpoint = time.monotonic()
        self._last_refresh = 0.0
        self.records_read = 0
        """Records read from the metadata partitions so far (for tests and metrics)."""
        self._committed_file = (
            None if committed_offsets_dir is None else CommittedOffsetsFile(committed_offsets_dir)
        )
        self._committed: dict[int, int] = {}
        if self._committed_file is not None:
            try:
                self._committed = self._committed_file.read()
            except StorageError as exc:
                logger.error(
                    "ignoring unreadable committed offsets file=%s error=%s",
                    self._committed_file.path,
                    exc,
                )

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Run the consumer on its own daemon thread."""
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(
                target=self.run, name="remote-log-metadata-consumer", daemon=True
            )
        self._thread.start()

    def run(self) -> None:
        """The consumer thread: rounds until ``close``."""
        while not self._closed:
            try:
                self.maybe_refresh_hosted_partitions()
                progressed = self.poll_once()
                self.maybe_checkpoint()
            except Exception:  # a bug must not silently stop the consumer thread
                logger.exception("remote log metadata consumer round failed")
                progressed = False
            if not progressed:
                self._wakeup.wait(self.config.idle_poll_ms / 1000)
                self._wakeup.clear()

    def wakeup(self) -> None:
        """Start the next round now (an event was just published)."""
        self._wakeup.set()

    def close(self) -> None:
        """Stop the thread, write a last checkpoint and wake every waiter (who then fail)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._lock.notify_all()
        self._wakeup.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        self.checkpoint()

    # ------------------------------------------------------------------ tracking
    def track(self, partitions: Iterable[TopicIdPartition]) -> None:
        """Start materialising ``partitions`` (restored from their snapshots when sound)."""
        for tip in partitions:
            with self._lock:
                if tip in self._tracked:
                    continue
            metadata_partition = self.partitioner.metadata_partition(tip)
            cache, next_offset = self._restore(tip, metadata_partition)
            with self._lock:
                if tip in self._tracked or self._closed:
                    continue
                applied = next_offset - 1
                self._tracked[tip] = _TrackedPartition(
                    metadata_partition=metadata_partition,
                    cache=cache,
                    applied_offset=applied,
                    snapshot_offset=applied,
                )
                position = self._positions.get(metadata_partition)
                if position is None:
                    committed = self._committed.get(metadata_partition, -1)
                    self._positions[metadata_partition] = min(committed + 1, next_offset)
                elif next_offset < position:
                    self._positions[metadata_partition] = next_offset
            logger.info(
                "tracking remote log metadata partition=%s metadata_partition=%s-%d"
                " restored_offset=%d",
                tip,
                REMOTE_LOG_METADATA_TOPIC_NAME,
                metadata_partition,
                next_offset - 1,
            )
        self.wakeup()

    def untrack(self, partitions: Iterable[TopicIdPartition]) -> None:
        """Stop materialising ``partitions``; a metadata partition left without tracked user
        partitions is unsubscribed (its position kept as the committed offset)."""
        with self._lock:
            for tip in partitions:
                state = self._tracked.pop(tip, None)
                self._hosted_tracked.discard(tip)
                if state is None:
                    continue
                mp = state.metadata_partition
                if not any(s.metadata_partition == mp for s in self._tracked.values()):
                    position = self._positions.pop(mp, None)
                    if position is not None:
                        self._committed[mp] = max(self._committed.get(mp, -1), position - 1)
            self._lock.notify_all()

    def tracked_partitions(self) -> set[TopicIdPartition]:
        with self._lock:
            return set(self._tracked)

    def maybe_refresh_hosted_partitions(self) -> None:
        """Broker mode: track hosted partitions that are new, untrack those that left."""
        if self._hosted_partitions is None:
            return
        now = time.monotonic()
        if (now - self._last_refresh) * 1000 < self.config.partition_refresh_interval_ms:
            return
        self._last_refresh = now
        hosted = self._hosted_partitions()
        with self._lock:
            gone = self._hosted_tracked - hosted
            new = hosted - self._hosted_tracked
            self._hosted_tracked = set(hosted)
        if gone:
            self.untrack(gone)
        if new:
            self.track(new)

    def _restore(
        self, tip: TopicIdPartition, metadata_partition: int
    ) -> tuple[RemoteLogMetadataCache, int]:
        directory = None if self._snapshot_dir_for is None else self._snapshot_dir_for(tip)
        if directory is None:
            return RemoteLogMetadataCache(tip), 0
        try:
            return maybe_restore_cache(
                RemoteLogMetadataSnapshotFile(directory, tip), metadata_partition
            )
        except StorageError as exc:  # an unreadable file: rebuild from the topic
            logger.error("rebuilding remote log metadata partition=%s error=%s", tip, exc)
            return RemoteLogMetadataCache(tip), 0

    # ------------------------------------------------------------------ queries
    def cache(self, tip: TopicIdPartition) -> RemoteLogMetadataCache | None:
        with self._lock:
            state = self._tracked.get(tip)
            return None if state is None else state.cache

    def is_ready(self, tip: TopicIdPartition) -> bool:
        with self._lock:
            state = self._tracked.get(tip)
            return state is not None and state.ready

    def applied_offset(self, tip: TopicIdPartition) -> int | None:
        with self._lock:
            state = self._tracked.get(tip)
            return None if state is None else state.applied_offset

    def positions(self) -> dict[int, int]:
        """Next offset to read per subscribed metadata partition."""
        with self._lock:
            return dict(self._positions)

    def wait_until_applied(
        self, tip: TopicIdPartition, offset: int, timeout_ms: int
    ) -> StorageError | None:
        """Block until ``tip``'s cache reflects metadata ``offset`` (inclusive).

        Returns the error the cache refused the event at ``offset`` with, if it did (the
        event is skipped), else ``None``. Raises ``RemoteLogMetadataConsumeTimeoutError``
        after ``timeout_ms`` and ``RemoteLogMetadataManagerClosedError`` on close.
        """
        deadline = time.monotonic() + timeout_ms / 1000
        with self._lock:
            while True:
                if self._closed:
                    raise RemoteLogMetadataManagerClosedError(
                        f"closed while waiting for offset {offset} of partition {tip}"
                    )
                state = self._tracked.get(tip)
                if state is None:
                    raise RemoteResourceNotFoundError(
                        f"partition {tip} is no longer tracked by this remote log metadata"
                        " manager (on_stop_partitions was called)"
                    )
                if state.applied_offset >= offset:
                    return self._rejections.get((state.metadata_partition, offset))
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise RemoteLogMetadataConsumeTimeoutError(
                        f"Timed out after {timeout_ms} ms waiting for partition {tip} to apply"
                        f" {REMOTE_LOG_METADATA_TOPIC_NAME}-{state.metadata_partition} up to"
                        f" offset {offset} (applied up to {state.applied_offset}); the event"
                        " is durable. Check the metadata partition's leader, or raise"
                        " remote.log.metadata.consume.wait.ms"
                    )
                self._lock.wait(remaining)

    def wait_until_ready(self, tip: TopicIdPartition, timeout_ms: int) -> None:
        """Block until ``is_ready(tip)``; the same errors as ``wait_until_applied``."""
        deadline = time.monotonic() + timeout_ms / 1000
        with self._lock:
            while True:
                if self._closed:
                    raise RemoteLogMetadataManagerClosedError(f"closed while loading {tip}")
                state = self._tracked.get(tip)
                if state is None:
                    raise RemoteResourceNotFoundError(f"partition {tip} is not tracked")
                if state.ready:
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise RemoteLogMetadataConsumeTimeoutError(
                        f"Timed out after {timeout_ms} ms loading the remote log metadata of"
                        f" {tip} from {REMOTE_LOG_METADATA_TOPIC_NAME}-"
                        f"{state.metadata_partition} (applied up to {state.applied_offset},"
                        f" target {state.ready_target}); check the metadata partition's leader"
                    )
                self._lock.wait(remaining)

    def wait_until_caught_up(
        self, tip: TopicIdPartition, *, at_least: int, timeout_ms: int
    ) -> None:
        """Block until ``tip``'s cache reflects its metadata partition up to the high
        watermark of a read that began after this call, and up to ``at_least`` (exclusive):
        every event published before the call, where ``is_ready`` only promises those
        published before ``tip`` was tracked. Reads of one metadata partition follow each
        other on the consumer thread, so the second read applied after the call began after
        it. The same errors as ``wait_until_applied``."""
        deadline = time.monotonic() + timeout_ms / 1000
        target: int | None = None
        with self._lock:
            state = self._tracked.get(tip)
            if state is None:
                raise RemoteResourceNotFoundError(f"partition {tip} is not tracked")
            metadata_partition = state.metadata_partition
            first, _ = self._reads.get(metadata_partition, (0, -1))
        self.wakeup()
        with self._lock:
            while True:
                if self._closed:
                    raise RemoteLogMetadataManagerClosedError(f"closed while catching up {tip}")
                state = self._tracked.get(tip)
                if state is None:
                    raise RemoteResourceNotFoundError(f"partition {tip} is not tracked")
                reads, high_watermark = self._reads.get(metadata_partition, (0, -1))
                if target is None and reads >= first + 2:
                    target = max(at_least, high_watermark)
                if target is not None and state.applied_offset + 1 >= target:
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise RemoteLogMetadataConsumeTimeoutError(
                        f"Timed out after {timeout_ms} ms catching up with the remote log"
                        f" metadata of {tip} in {REMOTE_LOG_METADATA_TOPIC_NAME}-"
                        f"{metadata_partition} (applied up to {state.applied_offset}, target"
                        f" {target}); check the metadata partition's leader"
                    )
                self._lock.wait(min(remaining, self.config.idle_poll_ms / 1000))
                self.wakeup()

    # ------------------------------------------------------------------ consuming
    def poll_once(self) -> bool:
        """One round over the subscribed metadata partitions; True if anything was read."""
        progressed = False
        for metadata_partition, position in self.positions().items():
            try:
                read = self._reader.read(
                    metadata_partition, position, self.config.max_records_per_read
                )
            except StorageError as exc:
                logger.warning(
                    "cannot read remote log metadata partition=%s-%d offset=%d error=%s",
                    REMOTE_LOG_METADATA_TOPIC_NAME,
                    metadata_partition,
                    position,
                    exc,
                )
                continue
            self.records_read += len(read.records)
            if self._apply_read(metadata_partition, position, read):
                progressed = True
        return progressed

    def _apply_read(self, metadata_partition: int, position: int, read: MetadataRead) -> bool:
        with self._lock:
            if self._positions.get(metadata_partition) != position:
                return False  # rewound or unsubscribed while reading: read again
            if read.moved_to_log_start:
                self._rebuild_skipped(metadata_partition, read.next_offset)
            for record in read.records:
                if record.offset >= position:
                    self._apply_record(metadata_partition, record.offset, record.value)
            next_offset = max(read.next_offset, position)
            self._positions[metadata_partition] = next_offset
            reads, _ = self._reads.get(metadata_partition, (0, -1))
            self._reads[metadata_partition] = (reads + 1, read.high_watermark)
            for state in self._tracked.values():
                if state.metadata_partition != metadata_partition:
                    continue
                state.applied_offset = max(state.applied_offset, next_offset - 1)
                if state.ready_target is None and not read.moved_to_log_start:
                    state.ready_target = read.high_watermark
                if (
                    not state.ready
                    and state.ready_target is not None
                    and state.applied_offset + 1 >= state.ready_target
                ):
                    state.ready = True
                    state.cache.mark_initialized()
            self._lock.notify_all()
            return next_offset > position

    def _rebuild_skipped(self, metadata_partition: int, log_start_offset: int) -> None:
        """The partition's records before ``log_start_offset`` are gone: every tracked cache
        that had not applied them all starts again empty and not ready, and is rebuilt from
        the log start (caller holds ``_lock``). What the log start leaves out is only what
        no reader needs (``storage_core.tiered.metadata.compaction``)."""
        for tip, state in self._tracked.items():
            if state.metadata_partition != metadata_partition:
                continue
            if state.applied_offset >= log_start_offset - 1:
                continue
            if state.applied_offset >= 0:
                logger.warning(
                    "rebuilding remote log metadata from the log start partition=%s"
                    " metadata_partition=%s-%d applied_offset=%d log_start_offset=%d",
                    tip,
                    REMOTE_LOG_METADATA_TOPIC_NAME,
                    metadata_partition,
                    state.applied_offset,
                    log_start_offset,
                )
            state.cache = RemoteLogMetadataCache(tip)
            state.applied_offset = log_start_offset - 1
            state.snapshot_offset = -1
            state.ready = False
            state.ready_target = None

    def _apply_record(self, metadata_partition: int, offset: int, value: bytes | None) -> None:
        """Apply one record (caller holds ``_lock``)."""
        where = f"{REMOTE_LOG_METADATA_TOPIC_NAME}-{metadata_partition}"
        if value is None:
            logger.warning(
                "skipping a null remote log metadata value partition=%s offset=%d", where, offset
            )
            return
        try:
            event = serde.deserialize(value)
        except CorruptRemoteLogMetadataError as exc:
            logger.error(
                "skipping an undecodable remote log metadata record partition=%s offset=%d"
                " error=%s",
                where,
                offset,
                exc,
            )
            return
        if isinstance(event, RemoteLogSegmentMetadataSnapshot):
            logger.warning(
                "skipping a snapshot entry found on the metadata topic partition=%s offset=%d",
                where,
                offset,
            )
            return
        tip = event.topic_id_partition
        state = self._tracked.get(tip)
        if state is None or state.metadata_partition != metadata_partition:
            return  # not ours (or not routed here): skipped, the position still advances
        if offset <= state.applied_offset:
            return  # already in the cache (restored from a snapshot or applied before)
        try:
            state.cache.handle(event)
        except (IllegalRemoteLogStateTransitionError, RemoteResourceNotFoundError) as exc:
            logger.warning(
                "skipping a refused remote log metadata event partition=%s"
                " metadata_partition=%s offset=%d error=%s",
                tip,
                where,
                offset,
                exc,
            )
            self._remember_rejection(metadata_partition, offset, exc)
        state.applied_offset = offset

    def _remember_rejection(self, metadata_partition: int, offset: int, exc: StorageError) -> None:
        self._rejections[(metadata_partition, offset)] = exc
        while len(self._rejections) > MAX_REMEMBERED_REJECTIONS:
            self._rejections.popitem(last=False)

    # ------------------------------------------------------------------ checkpoints
    def maybe_checkpoint(self) -> None:
        now = time.monotonic()
        if (now - self._last_checkpoint) * 1000 >= self.config.checkpoint_interval_ms:
            self._last_checkpoint = now
            self.checkpoint()

    def checkpoint(self) -> None:
        """Write changed snapshots, then the committed offsets. Failures are logged; the
        previous files stay (a restart then reads a little more)."""
        pending: list[tuple[_TrackedPartition, Path, Snapshot]] = []
        with self._lock:
            for tip, state in self._tracked.items():
                if state.applied_offset <= state.snapshot_offset:
                    continue
                directory = None if self._snapshot_dir_for is None else self._snapshot_dir_for(tip)
                if directory is None:
                    continue
                snapshot = snapshot_of(state.cache, state.metadata_partition, state.applied_offset)
                pending.append((state, directory, snapshot))
            committed = dict(self._committed)
            committed.update({mp: position - 1 for mp, position in self._positions.items()})
        for state, directory, snapshot in pending:
            try:
                directory.mkdir(parents=True, exist_ok=True)
                RemoteLogMetadataSnapshotFile(directory, snapshot.topic_id_partition).write(
                    snapshot
                )
            except (StorageError, OSError) as exc:
                logger.error(
                    "cannot write remote log metadata snapshot partition=%s dir=%s error=%s",
                    snapshot.topic_id_partition,
                    directory,
                    exc,
                )
                continue
            with self._lock:
                state.snapshot_offset = max(
                    state.snapshot_offset, snapshot.metadata_partition_offset
                )
        if self._committed_file is None:
            return
        committed = {mp: offset for mp, offset in committed.items() if offset >= 0}
        try:
            self._committed_file.write(committed)
        except StorageError as exc:
            logger.error(
                "cannot write committed offsets file=%s error=%s", self._committed_file.path, exc
            )
            return
        with self._lock:
            self._committed.update(committed)
