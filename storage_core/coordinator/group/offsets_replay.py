"""The replay of one ``__consumer_offsets`` partition, from its log start to its end (the
reading half of Kafka's ``loadGroupsAndOffsets``).

Every batch is checked (CRC, framing) and read in order:

* a plain batch: the last record of each key wins, a null value (tombstone) deletes the key;
  a tombstone of an offset also drops that partition's transactional offsets still pending
  for any producer, as the coordinator dropped them when it wrote the tombstone (Kafka 4's
  ``OffsetMetadataManager.replay``; Kafka 3.9 kept them on replay only);
* a transactional batch (a TxnOffsetCommit): its offsets are pending for its producer id;
* a control batch of that producer: COMMIT makes its pending offsets the committed ones where
  their batch is newer than the committed one's (``CommitRecordMetadataAndOffset.older_than``),
  ABORT drops them.

What is still pending at the end stays pending: its marker is still to come.

Thread safety: none; a replay is owned by the one thread loading the partition.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from storage_core.common import TopicPartition
from storage_core.coordinator.group.errors import CorruptCoordinatorRecordError
from storage_core.coordinator.group.offset_and_metadata import (
    OffsetAndMetadata,
)
from storage_core.coordinator.group.offsets_records import (
    GroupMetadataValue,
    OffsetCommitKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
)
from storage_core.coordinator.group.txn_offsets import CommitRecordMetadataAndOffset
from storage_core.log.log import Log
from storage_core.records import RecordBatch
from storage_core.records.end_transaction_marker import ControlRecordType, end_txn_marker_of

GroupPartition = tuple[str, TopicPartition]


@dataclass(slots=True)
class ReplayedPartition:
    """What a partition's log holds: committed offsets and pending transactional ones by
    group, and the last group record of each group (None: a tombstone)."""

    committed: dict[str, dict[TopicPartition, CommitRecordMetadataAndOffset]] = field(
        default_factory=dict
    )
    pending: dict[str, dict[int, dict[TopicPartition, CommitRecordMetadataAndOffset]]] = field(
        default_factory=dict
    )
    groups: dict[str, GroupMetadataValue | None] = field(default_factory=dict)

    def group_ids(self) -> list[str]:
        return sorted(set(self.groups) | set(self.committed) | set(self.pending))


def replay_offsets_partition(log: Log) -> ReplayedPartition:
    """Read ``log`` from its log start; raises ``StorageError`` on a corrupt batch or record."""
    committed: dict[GroupPartition, CommitRecordMetadataAndOffset] = {}
    pending: dict[int, dict[GroupPartition, CommitRecordMetadataAndOffset]] = {}
    groups: dict[str, GroupMetadataValue | None] = {}
    for batch in log.read_batches(log.log_start_offset):
        batch.ensure_valid()
        if batch.is_control:
            _end_transaction(batch, committed, pending)
            continue
        txn_offsets = pending.setdefault(batch.producer_id, {}) if batch.is_transactional else None
        for record in batch.records():
            if record.key is None:
                raise CorruptCoordinatorRecordError(
                    f"record at offset {record.offset} of {log.topic_partition} has no key"
                )
            key = decode_key(record.key)
            if not isinstance(key, OffsetCommitKey):
                groups[key.group] = (
                    None if record.value is None else decode_group_metadata_value(record.value)
                )
                continue
            where = (key.group, TopicPartition(key.topic, key.partition))
            if record.value is None:
                if txn_offsets is not None:
                    txn_offsets.pop(where, None)
                else:
                    committed.pop(where, None)
                    for offsets in pending.values():
                        offsets.pop(where, None)
                continue
            value = decode_offset_commit_value(record.value)
            commit = CommitRecordMetadataAndOffset(
                append_offset=batch.base_offset,
                offset=OffsetAndMetadata(
                    offset=value.offset,
                    leader_epoch=max(value.leader_epoch, -1),
                    metadata=value.metadata,
                    commit_timestamp_ms=value.commit_timestamp_ms,
                    expire_timestamp_ms=value.expire_timestamp_ms,
                ),
            )
            if txn_offsets is not None:
                txn_offsets[where] = commit
            else:
                committed[where] = commit
    replayed = ReplayedPartition(groups=groups)
    by_group: defaultdict[str, dict[TopicPartition, CommitRecordMetadataAndOffset]]
    by_group = defaultdict(dict)
    for (group_id, tp), commit in committed.items():
        by_group[group_id][tp] = commit
    replayed.committed = dict(by_group)
    for producer_id, offsets in pending.items():
        for (group_id, tp), commit in offsets.items():
            replayed.pending.setdefault(group_id, {}).setdefault(producer_id, {})[tp] = commit
    return replayed


def _end_transaction(
    batch: RecordBatch,
    committed: dict[GroupPartition, CommitRecordMetadataAndOffset],
    pending: dict[int, dict[GroupPartition, CommitRecordMetadataAndOffset]],
) -> None:
    marker = end_txn_marker_of(batch)
    if marker is None:
        return  # an empty control batch (its transaction was cleaned away)
    decided = pending.pop(batch.producer_id, {})
    if marker.control_type is not ControlRecordType.COMMIT:
        return
    for where, commit in decided.items():
        current = committed.get(where)
        if current is None or current.older_than(commit):
            committed[where] = commit
