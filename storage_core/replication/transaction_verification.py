"""The leader's side of transaction verification on the produce path (KIP-890 part 1): which
partitions of a produce carry transactional batches, and the guard each needs (Kafka's
``ReplicaManager.maybeStartTransactionVerificationForPartition`` and
``Partition.maybeStartTransactionVerification``).

A transactional batch of a producer without an ongoing transaction on the partition is
written only once the transaction coordinator has confirmed that the partition was added
to the transaction; the guard created here before asking is what the append must carry
(``Log.append_as_leader``). The question to the coordinator is the broker's
(``storage_core.server.add_partitions_to_txn_manager``): this layer does not import the
coordinator.

Thread-safety: the functions read request bytes and take the log's lock through
``Log.maybe_start_transaction_verification``; safe from any thread (on the event loop,
without waiting for it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from storage_core.common import TopicPartition
from storage_core.errors import CorruptRecordError, NotLeaderOrFollowerError
from storage_core.log.verification_guard import VerificationGuard
from storage_core.records import NO_PRODUCER_ID
from storage_core.records.memory_records import iter_batches
from storage_core.replication.partition import Partition


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionalBatches:
    """The transactional batches of one produce request (Kafka's ``transactionalProducerInfo``
    and ``topicPartitionBatchInfo``): the (producer id, epoch) pairs they carry, and per
    partition holding one the base sequence of its first batch."""

    producers: frozenset[tuple[int, int]]
    first_sequences: Mapping[TopicPartition, int]


def transactional_batches(entries: Mapping[TopicPartition, bytes]) -> TransactionalBatches:
    """Scan the batch headers of each partition's records. A record set whose framing is
    broken is skipped here: its append refuses it with the framing error."""
    producers: set[tuple[int, int]] = set()
    first_sequences: dict[TopicPartition, int] = {}
    for tp, records in entries.items():
        try:
            batches = [batch for _position, batch in iter_batches(records)]
        except CorruptRecordError:
            continue
        transactional = [
            b for b in batches if b.producer_id > NO_PRODUCER_ID and b.is_transactional
        ]
        for batch in transactional:
            producers.add((batch.producer_id, batch.producer_epoch))
        if transactional:
            first_sequences[tp] = batches[0].base_sequence
    return TransactionalBatches(producers=frozenset(producers), first_sequences=first_sequences)


def maybe_start_transaction_verification(
    get_partition: Callable[[TopicPartition], Partition],
    tp: TopicPartition,
    *,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    wait: bool = True,
) -> VerificationGuard | None:
    """The guard ``tp``'s append must carry, or ``VerificationGuard.SENTINEL`` when the
    producer's transaction is ongoing there (nothing to verify). Raises the partition's
    error: unknown here, offline, or ``NotLeaderOrFollowerError``. Without ``wait`` (the
    event loop) None when another thread holds the log (an append rolling or fsyncing):
    ask again where waiting is allowed."""
    partition = get_partition(tp)
    if not partition.is_leader:
        raise NotLeaderOrFollowerError(
            f"broker {partition.local_broker_id} is not the leader of {tp}"
        )
    log = partition.log
    if wait:
        return log.maybe_start_transaction_verification(producer_id, base_sequence, producer_epoch)
    if not log.try_hold():
        return None
    try:  # the lock is re-entrant: held, the call takes it again without waiting
        return log.maybe_start_transaction_verification(producer_id, base_sequence, producer_epoch)
    finally:
        log.release_hold()
