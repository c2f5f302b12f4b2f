"""Transactional offset commits not decided yet (KIP-98, KIP-447): the offsets a
TxnOffsetCommit wrote to ``__consumer_offsets``, pending by producer id until the
transaction's marker is written on that partition (Kafka's ``pendingTransactionalOffsetCommits``
of ``GroupMetadata`` and ``openGroupsForProducer`` of ``GroupMetadataManager``).

Life of one pending offset::

    prepare (TxnOffsetCommit asked)  --append acknowledged-->  appended (append offset known)
         |                                                         |            |
         +-- append failed: dropped                       COMMIT marker   ABORT marker
                                                                   |            |
                                        committed offset, if its append   dropped
                                        offset is newer than the one it
                                        would replace (Kafka's olderThan)

The append offset (the base offset of the batch in ``__consumer_offsets``) orders a
transactional commit against plain commits of the same partition, whichever completes first
in memory, and the same rule decides on replay, so memory and log agree.

Thread safety: none; used on the coordinator's asyncio loop (or by a partition's load, before
its groups are served).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from storage_core.common import TopicPartition
from storage_core.coordinator.group.offset_and_metadata import OffsetAndMetadata

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitRecordMetadataAndOffset:
    """An offset commit with the offset of its batch in ``__consumer_offsets`` (Kafka's
    ``CommitRecordMetadataAndOffset``); ``append_offset`` is None while the append is under
    way."""

    append_offset: int | None
    offset: OffsetAndMetadata

    def older_than(self, other: CommitRecordMetadataAndOffset) -> bool:
        """True when this commit's batch precedes ``other``'s in the log."""
        if self.append_offset is None or other.append_offset is None:
            raise ValueError("cannot order offset commits whose append has not completed")
        return self.append_offset < other.append_offset


class PendingTxnOffsetCommits:
    """One group's undecided transactional offsets: producer id -> partition -> commit."""

    def __init__(self) -> None:
        self._by_producer: dict[int, dict[TopicPartition, CommitRecordMetadataAndOffset]] = {}

    def __bool__(self) -> bool:
        return bool(self._by_producer)

    @property
    def producer_ids(self) -> frozenset[int]:
        return frozenset(self._by_producer)

    def has_producer(self, producer_id: int) -> bool:
        return producer_id in self._by_producer

    def has_partition(self, tp: TopicPartition) -> bool:
        return any(tp in offsets for offsets in self._by_producer.values())

    def of_producer(self, producer_id: int) -> dict[TopicPartition, CommitRecordMetadataAndOffset]:
        return dict(self._by_producer.get(producer_id, {}))

    def prepare(
        self, producer_id: int, offsets: Mapping[TopicPartition, OffsetAndMetadata]
    ) -> None:
        """A TxnOffsetCommit is about to be appended (Kafka's ``prepareTxnOffsetCommit``)."""
        pending = self._by_producer.setdefault(producer_id, {})
        for tp, offset in offsets.items():
            pending[tp] = CommitRecordMetadataAndOffset(append_offset=None, offset=offset)

    def on_append(
        self,
        producer_id: int,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        append_offset: int,
    ) -> None:
        """The append is acknowledged: each offset still pending as prepared gets its append
        offset (Kafka's ``onTxnOffsetCommitAppend``)."""
        pending = self._by_producer.get(producer_id)
        if pending is None:
            return  # the transaction ended, or the partition moved, meanwhile
        for tp, offset in offsets.items():
            current = pending.get(tp)
            if current is not None and current.offset == offset:
                pending[tp] = CommitRecordMetadataAndOffset(
                    append_offset=append_offset, offset=offset
                )

    def fail(self, producer_id: int, partitions: Iterable[TopicPartition]) -> None:
        """The append failed: the client retries (Kafka's ``failPendingTxnOffsetCommit``)."""
        pending = self._by_producer.get(producer_id)
        if pending is None:
            return
        for tp in partitions:
            pending.pop(tp, None)
        if not pending:
            del self._by_producer[producer_id]

    def put_loaded(
        self, producer_id: int, tp: TopicPartition, commit: CommitRecordMetadataAndOffset
    ) -> None:
        """A commit still pending at the end of a partition's replay."""
        self._by_producer.setdefault(producer_id, {})[tp] = commit

    def complete(self, producer_id: int) -> dict[TopicPartition, CommitRecordMetadataAndOffset]:
        """Forget the producer's pending offsets (its marker is written); returns them."""
        return self._by_producer.pop(producer_id, {})

    def remove_partitions(self, partitions: Iterable[TopicPartition]) -> None:
        """The partitions' offsets are deleted: no pending commit of them survives."""
        wanted = set(partitions)
        for producer_id in list(self._by_producer):
            pending = self._by_producer[producer_id]
            for tp in wanted.intersection(pending):
                del pending[tp]
            if not pending:
                del self._by_producer[producer_id]

    def partitions(self) -> set[TopicPartition]:
        return {tp for offsets in self._by_producer.values() for tp in offsets}


def materialize(
    committed: dict[TopicPartition, CommitRecordMetadataAndOffset],
    decided: Mapping[TopicPartition, CommitRecordMetadataAndOffset],
    *,
    group_id: str,
    producer_id: int,
) -> list[TopicPartition]:
    """Make the committed transaction's offsets ``decided`` the committed ones where their
    append offset is newer than the current commit's (Kafka's
    ``completePendingTxnOffsetCommit``); returns the partitions that changed.

    A commit whose append never completed cannot be ordered and is skipped with an error
    line (Kafka raises): the marker came before the TxnOffsetCommit was acknowledged, which
    a transaction coordinator never does for a TxnOffsetCommit it answered.
    """
    changed = []
    for tp, commit in decided.items():
        if commit.append_offset is None:
            logger.error(
                "transactional offset commit completed before its append group=%s"
                " producer_id=%d partition=%s: not applied",
                group_id,
                producer_id,
                tp,
            )
            continue
        current = committed.get(tp)
        if current is None or current.older_than(commit):
            committed[tp] = commit
            changed.append(tp)
    return changed


class OpenGroupsForProducer:
    """Producer id -> the groups with offsets pending for it (Kafka's
    ``openGroupsForProducer``): a marker finds its groups without scanning every group."""

    def __init__(self) -> None:
        self._groups: dict[int, set[str]] = {}

    def add(self, producer_id: int, group_id: str) -> None:
        self._groups.setdefault(producer_id, set()).add(group_id)

    def remove(self, producer_id: int, group_id: str) -> None:
        groups = self._groups.get(producer_id)
        if groups is None:
            return
        groups.discard(group_id)
        if not groups:
            del self._groups[producer_id]

    def remove_group(self, group_id: str) -> None:
        for producer_id in list(self._groups):
            self.remove(producer_id, group_id)

    def groups_of(self, producer_id: int) -> frozenset[str]:
        return frozenset(self._groups.get(producer_id, ()))
