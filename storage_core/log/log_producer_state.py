"""How a log keeps its ``ProducerStateManager`` in step with its batches: Kafka's static
``UnifiedLog.analyzeAndValidateProducerState`` (before an append is written) and
``UnifiedLog.rebuildProducerState`` (on load and after truncation).

Thread safety: none; ``Log`` calls both under its lock.
"""

from __future__ import annotations

from collections.abc import Iterator

from storage_core.errors import InvalidTxnStateError
from storage_core.log.log_segment import LogSegment
from storage_core.log.log_segments import LogSegments
from storage_core.log.log_validator import LogAppendInfo
from storage_core.log.producer_append_info import AppendOrigin, ProducerAppendInfo
from storage_core.log.producer_state import ProducerStateManager
from storage_core.log.producer_state_entry import BatchMetadata, CompletedTxn, ProducerBatch
from storage_core.log.verification_guard import VerificationGuard
from storage_core.records import NO_PRODUCER_ID, RecordBatch, RecordBatchHeader
from storage_core.records.end_transaction_marker import end_txn_marker_of


def analyze_and_validate_producer_state(
    manager: ProducerStateManager,
    records: bytes | bytearray | memoryview,
    info: LogAppendInfo,
    origin: AppendOrigin,
    verification_guard: VerificationGuard | None = None,
) -> tuple[list[ProducerAppendInfo], list[CompletedTxn], BatchMetadata | None]:
    """Kafka's ``analyzeAndValidateProducerState`` over batches with their final offsets.

    Returns the updates to apply once written, the transactions the batches end, and,
    for a client append that repeats a batch already in the log, that batch.

    ``verification_guard`` (KIP-890 part 1): None when the caller does not verify
    transactions (``transaction.partition.verification.enable=false``, or not a produce);
    else a client's transactional data batch of a producer without an ongoing transaction
    here is written only if the guard is the one its verification created and that no
    transactional append of the producer has cleared since (``InvalidTxnStateError``).
    """
    updates: dict[int, ProducerAppendInfo] = {}
    completed: list[CompletedTxn] = []
    for batch in info.batches:
        if batch.producer_id <= NO_PRODUCER_ID:
            continue
        marker = None
        if batch.is_control:
            marker = end_txn_marker_of(RecordBatch.from_buffer(records, batch.position))
        producer_batch = ProducerBatch.of(batch, marker)
        if origin is AppendOrigin.CLIENT:
            last = manager.last_entry(batch.producer_id)
            duplicate = None if last is None else last.find_duplicate_batch(producer_batch)
            if duplicate is not None:
                return list(updates.values()), completed, duplicate
            if verification_guard is not None and batch_missing_required_verification(
                manager, producer_batch, verification_guard
            ):
                raise InvalidTxnStateError(
                    f"Record was not part of an ongoing transaction: producer"
                    f" {batch.producer_id} has no transaction open on partition"
                    f" {manager.partition} and the coordinator did not confirm that the"
                    " partition was added to its transaction (AddPartitionsToTxn)"
                )
        update = updates.get(batch.producer_id)
        if update is None:
            update = manager.prepare_update(batch.producer_id, origin)
            updates[batch.producer_id] = update
        done = update.append(producer_batch)
        if done is not None:
            completed.append(done)
    return list(updates.values()), completed, None


def batch_missing_required_verification(
    manager: ProducerStateManager, batch: ProducerBatch, verification_guard: VerificationGuard
) -> bool:
    """A transactional data batch of a producer without an ongoing transaction, whose
    append does not carry the guard of the producer's verification entry (Kafka's
    ``hasOngoingTransaction`` and ``batchMissingRequiredVerification``)."""
    if not batch.is_transactional or batch.is_control:
        return False
    if manager.has_ongoing_transaction(batch.producer_id):
        return False
    entry = manager.verification_state_entry(batch.producer_id)
    guard = VerificationGuard.SENTINEL if entry is None else entry.verification_guard
    return not guard.verify(verification_guard)


def rebuild_producer_state(
    manager: ProducerStateManager,
    segments: LogSegments,
    *,
    log_start_offset: int,
    last_offset: int,
    now_ms: int,
) -> None:
    """Kafka's ``rebuildProducerState``: reload the newest snapshot at or below
    ``last_offset`` and replay the batches from there to ``last_offset`` (exclusive).

    Without any snapshot the whole local log is replayed, even after a clean shutdown
    (Kafka then skips the scan, assuming a log from before idempotence; here a log from
    before snapshots existed would lose its producers that way). Snapshots are written on
    the way at the base offsets of the last two segments and at ``last_offset``.
    """
    offsets_to_snapshot = {segments[-1].base_offset, last_offset}
    if len(segments) > 1:
        offsets_to_snapshot.add(segments[-2].base_offset)
    was_empty = manager.is_empty and manager.map_end_offset >= last_offset
    manager.truncate_and_reload(log_start_offset, last_offset, now_ms)
    replay_from = manager.map_end_offset
    if last_offset > replay_from and not was_empty:
        for i, segment in enumerate(segments):
            next_base = segments.next_base_offset(i)
            if next_base is not None and next_base <= replay_from:
                continue
            if segment.base_offset >= last_offset:
                break
            start = max(segment.base_offset, manager.map_end_offset, log_start_offset)
            manager.update_map_end_offset(start)
            if segment.base_offset in offsets_to_snapshot:
                manager.take_snapshot()
            manager.load_producers_from_batches(_producer_batches(segment, start, last_offset))
    manager.update_map_end_offset(last_offset)
    manager.take_snapshot()


def _producer_batches(
    segment: LogSegment, start_offset: int, end_offset: int
) -> Iterator[ProducerBatch]:
    """Batches of ``segment`` with a producer id, from the one holding ``start_offset``
    to the last one ending below ``end_offset`` (exclusive)."""
    position = 0
    if segment.base_offset < start_offset:
        position = segment.offset_index.lookup(start_offset).position
    for _position, header in segment.log.batches(position):
        if header.last_offset >= end_offset:
            return
        if header.last_offset < start_offset or header.producer_id <= NO_PRODUCER_ID:
            continue
        yield _producer_batch(header, segment)


def _producer_batch(header: RecordBatchHeader, segment: LogSegment) -> ProducerBatch:
    marker = end_txn_marker_of(header.load(segment.log)) if header.is_control else None
    return ProducerBatch.of(header, marker)
