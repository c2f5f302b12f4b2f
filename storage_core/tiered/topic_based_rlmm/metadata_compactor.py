"""``RemoteLogMetadataCompactor``: keeps ``__remote_log_metadata`` bounded by the live segments.

Runs in each broker with remote storage (``broker_setup``), on its own thread, every
``remote.log.metadata.compaction.interval.ms`` (0: never). A round, for each metadata
partition this broker leads (only the leader moves a log start offset, as DeleteRecords):

1. reads the partition's local log from its log start offset to the high watermark (at most
   ``MAX_RECORDS_PER_ROUND`` records; a larger partition is left for a later round);
2. sets the limit: records appended less than ``remote.log.metadata.compaction.min.lag.ms``
   ago stay, and so does anything this broker's own consumer has not applied yet. The lag is
   what lets every running broker apply and snapshot a record before it may go (snapshots are
   written every 30 s): a broker started later, or down meanwhile, finds its snapshot older
   than the log start and rebuilds that partition's caches from the log start
   (``ConsumerTask``), which is correct, only slower;
3. plans (``storage_core.tiered.metadata.compaction``, where the design and what a reader
   sees at each moment are written out); re-appends the plan's events, if any, as leader
   appends (acks=-1) in batches of at most ``RESTATE_BATCH_BYTES`` of values and half the
   partition's ``segment.bytes`` / ``max.message.bytes`` (a larger batch is refused). Before
   each batch it reads what was appended since it last looked (uncommitted records
   included), drops the segments those records touch, and appends only if the log still
   ends where it looked (compare-and-append; on a miss it looks again, at most
   ``MAX_RESTATE_ATTEMPTS`` times a round). Then it reads and plans again at once (the
   records before the re-appended ones are old: they may go now);
4. if the plan cuts: replays the records from the old log start and from the cut
   (``verify_cut``) and, only if the states are the same, moves the log start offset to the
   cut (``Log.maybe_increment_log_start_offset``, reason DeleteRecords), checkpoints it and
   wakes the followers' fetches, as the DeleteRecords handler does. Followers learn the new
   log start from their fetches; the segments wholly below it are deleted by the next
   retention pass.

Everything is logged with the metadata partition (``__remote_log_metadata-7``) and counts.
A failing round is logged and retried next interval; it never stops the broker.

Thread-safety: ``compact_once`` runs on the compactor's thread (or a test's); ``close`` from
any thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from storage_core.errors import LogEndOffsetMovedError, StorageError
from storage_core.tiered.metadata.compaction import (
    MIN_RESTATE_GAIN_RECORDS,
    MetadataEntry,
    RestatedSegment,
    plan_metadata_compaction,
    restatement_refused,
    untouched_since_plan,
    verify_cut,
)
from storage_core.tiered.topic_based_rlmm.config import REMOTE_LOG_METADATA_TOPIC_NAME
from storage_core.tiered.topic_based_rlmm.readers import MetadataPartitionReader

logger = logging.getLogger(__name__)

DEFAULT_COMPACTION_INTERVAL_MS = 60_000
DEFAULT_COMPACTION_MIN_LAG_MS = 120_000
MAX_RECORDS_PER_ROUND = 2_000_000
"""Records of one metadata partition read by one round at most (~600 MB of metadata)."""
READ_CHUNK_RECORDS = 50_000
RESTATE_BATCH_BYTES = 512 * 1024
RESTATE_BATCH_SEGMENTS = 500
"""Segments per re-appended batch (two records each)."""
MAX_RESTATE_ATTEMPTS = 20
"""Compare-and-appends that found the log moved, per round; then the rest waits a round."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactorConfig:
    """``interval_ms``: between rounds (> 0). ``min_lag_ms``: records younger stay (>= 0)."""

    interval_ms: int = DEFAULT_COMPACTION_INTERVAL_MS
    min_lag_ms: int = DEFAULT_COMPACTION_MIN_LAG_MS
    min_restate_gain_records: int = MIN_RESTATE_GAIN_RECORDS
    restate: bool = True
    """Re-append pinning segments' events (``remote.log.metadata.compaction.restate.enable``):
    without it, one long-lived segment pins every cut below its add."""

    def __post_init__(self) -> None:
        if self.interval_ms <= 0:
            raise ValueError(f"interval_ms must be positive, got {self.interval_ms}")
        if self.min_lag_ms < 0:
            raise ValueError(f"min_lag_ms must be >= 0, got {self.min_lag_ms}")


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionOutcome:
    """One metadata partition's round: records read (log start to HW), log start offsets
    before and after, segments re-appended, and why no cut was made (``None``: cut or
    nothing to cut)."""

    metadata_partition: int
    records: int
    log_start_offset_before: int
    log_start_offset_after: int
    restated_segments: int
    refused: str | None = None


class PublishBatch(Protocol):
    def __call__(
        self, metadata_partition: int, values: list[bytes], *, expected_log_end_offset: int
    ) -> int:
        """Append ``values`` in one batch (acks=-1) only if the partition's log ends at
        ``expected_log_end_offset`` (else ``LogEndOffsetMovedError``); the last offset."""


class MetadataPartitionHost:
    """What the compactor needs from the broker hosting the metadata partitions."""

    def __init__(
        self,
        *,
        led_partitions: Callable[[], Iterable[int]],
        log_start_offset: Callable[[int], int],
        high_watermark: Callable[[int], int],
        reader: MetadataPartitionReader,
        read_appended: Callable[[int, int], tuple[Iterable[MetadataEntry], int]],
        publish_batch: PublishBatch,
        move_log_start: Callable[[int, int], None],
        consumer_position: Callable[[int], int | None],
        max_batch_bytes: Callable[[int], int] = lambda _partition: 1024 * 1024,
    ) -> None:
        self.led_partitions = led_partitions
        self.log_start_offset = log_start_offset
        self.high_watermark = high_watermark
        self.reader = reader
        self.read_appended = read_appended
        """(the records from an offset to the log end, uncommitted ones included, read as
        iterated; that log end)."""
        self.publish_batch = publish_batch
        self.move_log_start = move_log_start
        self.consumer_position = consumer_position
        self.max_batch_bytes = max_batch_bytes
        """The partition's largest batch: min(segment.bytes, max.message.bytes)."""


class RemoteLogMetadataCompactor:
    """Compacts the metadata partitions ``host`` leads; see the module doc."""

    def __init__(
        self,
        host: MetadataPartitionHost,
        *,
        config: CompactorConfig | None = None,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self._host = host
        self.config = config or CompactorConfig()
        self._clock_ms = clock_ms
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._settled: dict[int, tuple[int, int]] = {}
        """Per metadata partition, (log start, HW) after a round that could do nothing."""
        self.rounds = 0

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="remote-log-metadata-compactor", daemon=True
            )
            self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.config.interval_ms / 1000):
            try:
                self.compact_once()
            except Exception:  # a bug must not stop the thread
                logger.exception("remote log metadata compaction round failed")

    def compact_once(self) -> list[CompactionOutcome]:
        """One round over the led metadata partitions; a partition whose log start and HW
        are those a round that could do nothing left (every record old enough) is skipped
        without reading, and has no outcome."""
        outcomes = []
        for metadata_partition in sorted(self._host.led_partitions()):
            if self._stop.is_set():
                break
            where = f"{REMOTE_LOG_METADATA_TOPIC_NAME}-{metadata_partition}"
            try:
                outcome = self._compact(metadata_partition)
            except StorageError as exc:
                logger.warning(
                    "remote log metadata compaction skipped partition=%s error=%s", where, exc
                )
                continue
            if outcome is None:
                continue
            outcomes.append(outcome)
            if outcome.log_start_offset_after > outcome.log_start_offset_before or (
                outcome.restated_segments or outcome.refused
            ):
                logger.info(
                    "remote log metadata compacted partition=%s records=%d"
                    " log_start_offset=%d->%d restated_segments=%d refused=%s",
                    where,
                    outcome.records,
                    outcome.log_start_offset_before,
                    outcome.log_start_offset_after,
                    outcome.restated_segments,
                    outcome.refused,
                )
        self.rounds += 1
        return outcomes

    def _read(self, metadata_partition: int) -> tuple[int, list[MetadataEntry], list[int], int]:
        """(log start offset, records up to the HW, their timestamps, the offset the records
        read end before)."""
        host = self._host
        log_start = host.log_start_offset(metadata_partition)
        end = host.high_watermark(metadata_partition)
        entries: list[MetadataEntry] = []
        timestamps: list[int] = []
        offset = log_start
        while offset < end and len(entries) < MAX_RECORDS_PER_ROUND:
            read = host.reader.read(metadata_partition, offset, READ_CHUNK_RECORDS)
            if read.moved_to_log_start:  # cut meanwhile (another leader's round)
                raise StorageError(f"log start moved to {read.next_offset} while reading")
            for record in read.records:
                if record.value is not None and record.offset < end:
                    entries.append(MetadataEntry.decode(record.offset, record.value))
                    timestamps.append(record.timestamp_ms)
            if read.next_offset <= offset:
                break
            offset = read.next_offset
        return log_start, entries, timestamps, min(offset, end)

    def _limit(
        self, metadata_partition: int, entries: list[MetadataEntry], timestamps: list[int], end: int
    ) -> int:
        cutoff_ms = self._clock_ms() - self.config.min_lag_ms
        limit = end
        for entry, timestamp_ms in zip(entries, timestamps, strict=True):
            if timestamp_ms > cutoff_ms:
                limit = entry.offset
                break
        position = self._host.consumer_position(metadata_partition)
        return limit if position is None else min(limit, position)

    def _compact(self, metadata_partition: int) -> CompactionOutcome | None:
        host = self._host
        offsets = (
            host.log_start_offset(metadata_partition),
            host.high_watermark(metadata_partition),
        )
        if self._settled.get(metadata_partition) == offsets:
            return None  # nothing appended or cut since a round that found nothing to do
        outcome = self._pass(metadata_partition, restate=self.config.restate)
        if not outcome.restated_segments:
            return outcome
        # the re-appended events are starts now: the records before them may go at once
        # (they are old; the re-appended ones stay above the cut)
        again = self._pass(metadata_partition, restate=False)
        return CompactionOutcome(
            metadata_partition=metadata_partition,
            records=again.records,
            log_start_offset_before=outcome.log_start_offset_before,
            log_start_offset_after=again.log_start_offset_after,
            restated_segments=outcome.restated_segments,
            refused=again.refused or outcome.refused,
        )

    def _pass(self, metadata_partition: int, *, restate: bool) -> CompactionOutcome:
        host = self._host
        log_start, entries, timestamps, read_end = self._read(metadata_partition)
        end = entries[-1].offset + 1 if entries else log_start
        limit = self._limit(metadata_partition, entries, timestamps, end)
        plan = plan_metadata_compaction(
            entries,
            log_start_offset=log_start,
            cut_limit_offset=limit,
            min_restate_gain_records=self.config.min_restate_gain_records,
        )
        refused = None
        new_start = log_start
        if plan.cut_offset is not None:
            refused = verify_cut(entries, plan.cut_offset)
            if refused is None:
                host.move_log_start(metadata_partition, plan.cut_offset)
                new_start = plan.cut_offset
            else:
                logger.warning(
                    "remote log metadata not cut partition=%s-%d cut_offset=%d reason=%s",
                    REMOTE_LOG_METADATA_TOPIC_NAME,
                    metadata_partition,
                    plan.cut_offset,
                    refused,
                )
        restated = 0
        if restate and plan.restate:
            kept = [e for e in entries if e.offset >= new_start]
            pointless = restatement_refused(kept, plan.restate, log_start_offset=new_start)
            if pointless is None:
                restated = self._restate(metadata_partition, plan.restate, read_end=read_end)
            else:
                logger.warning(
                    "remote log metadata not re-appended partition=%s-%d segments=%d reason=%s",
                    REMOTE_LOG_METADATA_TOPIC_NAME,
                    metadata_partition,
                    len(plan.restate),
                    pointless,
                )
        if new_start == log_start and not restated and limit >= end:
            # every record was old enough and still nothing to do: the same until one comes
            self._settled[metadata_partition] = (log_start, read_end)
        else:
            self._settled.pop(metadata_partition, None)
        return CompactionOutcome(
            metadata_partition=metadata_partition,
            records=len(entries),
            log_start_offset_before=log_start,
            log_start_offset_after=new_start,
            restated_segments=restated,
            refused=refused,
        )

    def _restate(
        self, metadata_partition: int, segments: tuple[RestatedSegment, ...], *, read_end: int
    ) -> int:
        """Re-append ``segments`` planned from the records below ``read_end``; how many were."""
        host = self._host
        # half the partition's limit: the batch and record headers come on top of the values
        limit_bytes = min(RESTATE_BATCH_BYTES, host.max_batch_bytes(metadata_partition) // 2)
        pending = list(segments)
        looked_to = read_end
        restated = attempts = 0
        while pending:
            appended, log_end = host.read_appended(metadata_partition, looked_to)
            pending = untouched_since_plan(pending, appended)
            looked_to = log_end
            batch = _next_batch(pending, limit_bytes)
            if not batch:
                break
            values = [value for segment in batch for value in (segment.add, segment.finished)]
            try:
                last_offset = host.publish_batch(
                    metadata_partition, values, expected_log_end_offset=looked_to
                )
            except LogEndOffsetMovedError:
                attempts += 1
                if attempts == MAX_RESTATE_ATTEMPTS:
                    logger.info(
                        "remote log metadata re-append left for a later round partition=%s-%d"
                        " segments=%d reason=the log kept moving",
                        REMOTE_LOG_METADATA_TOPIC_NAME,
                        metadata_partition,
                        len(pending),
                    )
                    break
                continue
            del pending[: len(batch)]
            looked_to = last_offset + 1
            restated += len(batch)
        return restated


def _next_batch(pending: list[RestatedSegment], limit_bytes: int) -> list[RestatedSegment]:
    """The first segments of ``pending`` whose values fit ``limit_bytes`` (at least one)."""
    batch: list[RestatedSegment] = []
    size = 0
    for segment in pending:
        grown = size + len(segment.add) + len(segment.finished)
        if batch and (grown > limit_bytes or len(batch) == RESTATE_BATCH_SEGMENTS):
            break
        batch.append(segment)
        size = grown
    return batch
