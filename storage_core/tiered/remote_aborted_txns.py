"""The aborted transactions of a read_committed read of tiered offsets (Kafka's
``RemoteLogManager.collectAbortedTransactions`` with KIP-1058's
``findNextSegmentWithTxnIndex``).

A read_committed consumer reading records ``[start_offset, upper_bound_offset)`` from a remote
segment must learn every aborted transaction overlapping that range, to drop its records.
An abort is indexed in the segment holding its ABORT marker, which may come after the records
read; so the search goes on, as Kafka's does::

    this remote segment -> the following remote segments of the partition's epoch lineage
    (those whose metadata says ``txn_idx_empty`` are skipped without fetching anything) ->
    the local segments (``Log.collect_aborted_transactions``)

and stops at the first index whose search is complete (an entry whose LSO is at or above
``upper_bound_offset``: every later abort was decided after the range). A segment both remote
and still local is searched twice; each transaction is returned once (Kafka collects them
in a set).

Thread-safety: called on the remote reader threads; uses only thread-safe objects (RLMM,
index cache, leader-epoch cache, the log).
"""

from __future__ import annotations

from typing import Protocol

from storage_core.common import TopicIdPartition
from storage_core.log.leader_epoch_cache import EpochEntry
from storage_core.log.transaction_index import AbortedTxn
from storage_core.tiered.metadata.metadata import RemoteLogSegmentMetadata
from storage_core.tiered.remote_index_cache import RemoteIndexCache
from storage_core.tiered.remote_log_metadata_manager import RemoteLogMetadataManager

# Segments looked up in one epoch while skipping empty transaction indexes (a bound on the
# walk, far above any real partition's segment count per epoch).
MAX_SEGMENTS_PER_EPOCH_WALK = 1_000_000


class LocalAbortedTxns(Protocol):
    """What the search needs of the partition's ``Log``."""

    def collect_aborted_transactions(
        self, start_offset: int, upper_bound_offset: int
    ) -> list[AbortedTxn]: ...


class EpochLineage(Protocol):
    """What the search needs of the partition's ``LeaderEpochFileCache``."""

    def epoch_for_offset(self, offset: int) -> int | None: ...

    def epoch_entries(self) -> list[EpochEntry]: ...


def collect_aborted_transactions(
    *,
    rlmm: RemoteLogMetadataManager,
    index_cache: RemoteIndexCache,
    segment: RemoteLogSegmentMetadata,
    start_offset: int,
    upper_bound_offset: int,
    epochs: EpochLineage,
    local_log: LocalAbortedTxns,
) -> list[AbortedTxn]:
    """Aborted transactions overlapping ``[start_offset, upper_bound_offset)`` (exclusive),
    from ``segment`` on; see the module docstring. Raises what the store raises."""
    found: dict[AbortedTxn, None] = {}
    current: RemoteLogSegmentMetadata | None = segment
    while current is not None:
        if not current.txn_idx_empty:
            with index_cache.acquire(current) as entry:
                result = entry.collect_aborted_txns(start_offset, upper_bound_offset)
            found.update(dict.fromkeys(result.aborted_transactions))
            if result.is_complete:
                return list(found)
        current = find_next_segment_with_txn_index(
            rlmm, current.remote_log_segment_id.topic_id_partition, current.end_offset + 1, epochs
        )
    found.update(
        dict.fromkeys(local_log.collect_aborted_transactions(start_offset, upper_bound_offset))
    )
    return list(found)


def find_next_segment_with_txn_index(
    rlmm: RemoteLogMetadataManager,
    tip: TopicIdPartition,
    offset: int,
    epochs: EpochLineage,
) -> RemoteLogSegmentMetadata | None:
    """KIP-1058's ``findNextSegmentWithTxnIndex``: the first remote segment at or after
    ``offset`` in the lineage (from the epoch holding ``offset`` on) whose transaction index is
    not empty; None when there is none. Segments marked ``txn_idx_empty`` are passed over by
    their metadata alone."""
    initial_epoch = epochs.epoch_for_offset(offset)
    if initial_epoch is None:
        return None
    for entry in epochs.epoch_entries():
        epoch = entry.epoch
        if epoch < initial_epoch:
            continue
        next_offset = max(entry.start_offset, offset)
        for _ in range(MAX_SEGMENTS_PER_EPOCH_WALK):
            metadata = rlmm.remote_log_segment_metadata(tip, epoch, next_offset)
            if metadata is None:
                break
            if not metadata.txn_idx_empty:
                return metadata
            next_offset = metadata.end_offset + 1
    return None
