"""What the partition keeps per producer id (Kafka's ``ProducerStateEntry``, ``BatchMetadata``
and ``CompletedTxn``), the batch facts it is built from, and the int32 sequence ring.

Sequence numbers are int32 and wrap from 2147483647 to 0.

These are immutable values: an entry changes by building a new one.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Protocol

from storage_core.records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, NO_TIMESTAMP
from storage_core.records.end_transaction_marker import EndTransactionMarker

NUM_BATCHES_TO_RETAIN = 5

INT16_MIN, INT16_MAX = -(1 << 15), (1 << 15) - 1
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


# ---------------------------------------------------------------------------- sequences
def increment_sequence(sequence: int, increment: int) -> int:
    """``sequence + increment`` on the int32 ring (Kafka's ``incrementSequence``)."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def decrement_sequence(sequence: int, decrement: int) -> int:
    """``sequence - decrement`` on the int32 ring (Kafka's ``decrementSequence``)."""
    if sequence < decrement:
        return INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


def in_sequence(last_sequence: int, next_sequence: int) -> bool:
    """True if ``next_sequence`` directly follows ``last_sequence`` (wrapping to 0)."""
    return next_sequence == last_sequence + 1 or (next_sequence == 0 and last_sequence == INT32_MAX)


# ---------------------------------------------------------------------------- values
class BatchFields(Protocol):
    """What ``ProducerBatch.of`` reads of a batch."""

    @property
    def producer_id(self) -> int: ...
    @property
    def producer_epoch(self) -> int: ...
    @property
    def base_sequence(self) -> int: ...
    @property
    def base_offset(self) -> int: ...
    @property
    def last_offset_delta(self) -> int: ...
    @property
    def max_timestamp(self) -> int: ...
    @property
    def is_transactional(self) -> bool: ...
    @property
    def is_control(self) -> bool: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerBatch:
    """What producer state needs to know of one batch, with the offsets it has in the log.

    ``end_txn_marker`` is set for a control batch carrying a transaction marker.
    """

    producer_id: int
    producer_epoch: int
    base_sequence: int
    base_offset: int
    last_offset_delta: int
    max_timestamp: int
    is_transactional: bool = False
    is_control: bool = False
    end_txn_marker: EndTransactionMarker | None = None

    @staticmethod
    def of(batch: BatchFields, end_txn_marker: EndTransactionMarker | None = None) -> ProducerBatch:
        """The fields of a batch read from a log or a request (``RecordBatch``,
        ``RecordBatchHeader``, a validated append's batch)."""
        return ProducerBatch(
            producer_id=batch.producer_id,
            producer_epoch=batch.producer_epoch,
            base_sequence=batch.base_sequence,
            base_offset=batch.base_offset,
            last_offset_delta=batch.last_offset_delta,
            max_timestamp=batch.max_timestamp,
            is_transactional=batch.is_transactional,
            is_control=batch.is_control,
            end_txn_marker=end_txn_marker,
        )

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID

    @property
    def last_offset(self) -> int:
        """Offset of the last record (inclusive)."""
        return self.base_offset + self.last_offset_delta

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record (Kafka's ``lastSequence``), wrapping at int32."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return increment_sequence(self.base_sequence, self.last_offset_delta)


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchMetadata:
    """One appended batch of a producer: its last sequence and last offset (both inclusive),
    ``offset_delta`` = last offset - first offset, and its max timestamp."""

    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    def __post_init__(self) -> None:
        if not INT32_MIN <= self.last_seq <= INT32_MAX:
            raise ValueError(f"last sequence {self.last_seq} does not fit an int32")
        if not 0 <= self.offset_delta <= INT32_MAX:
            raise ValueError(f"offset delta {self.offset_delta} must be in [0, {INT32_MAX}]")
        if not 0 <= self.last_offset - self.offset_delta <= self.last_offset <= INT64_MAX:
            raise ValueError(
                f"batch offsets [{self.last_offset - self.offset_delta}, {self.last_offset}]"
                " must be non-negative int64s"
            )

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        """Offset of the batch's first record (inclusive)."""
        return self.last_offset - self.offset_delta


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerStateEntry:
    """The state of one producer id (Kafka's ``ProducerStateEntry``).

    ``batch_metadata`` holds at most ``NUM_BATCHES_TO_RETAIN`` batches, oldest first, all of
    the current ``producer_epoch``. ``current_txn_first_offset`` is the first offset of the
    producer's open transaction, None when none is open.
    """

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    coordinator_epoch: int = -1
    last_timestamp: int = NO_TIMESTAMP
    current_txn_first_offset: int | None = None
    batch_metadata: tuple[BatchMetadata, ...] = field(default=())

    def __post_init__(self) -> None:
        if not 0 <= self.producer_id <= INT64_MAX:
            raise ValueError(f"producer id {self.producer_id} must be a non-negative int64")
        if not INT16_MIN <= self.producer_epoch <= INT16_MAX:
            raise ValueError(f"producer epoch {self.producer_epoch} does not fit an int16")
        if not INT32_MIN <= self.coordinator_epoch <= INT32_MAX:
            raise ValueError(f"coordinator epoch {self.coordinator_epoch} does not fit an int32")
        if len(self.batch_metadata) > NUM_BATCHES_TO_RETAIN:
            raise ValueError(
                f"{len(self.batch_metadata)} batches kept, at most {NUM_BATCHES_TO_RETAIN}"
            )
        if self.current_txn_first_offset is not None and self.current_txn_first_offset < 0:
            raise ValueError(f"transaction first offset {self.current_txn_first_offset} < 0")

    @property
    def is_empty(self) -> bool:
        """True when no batch of the current epoch is known."""
        return not self.batch_metadata

    @property
    def first_seq(self) -> int:
        return self.batch_metadata[0].first_seq if self.batch_metadata else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        return self.batch_metadata[-1].last_seq if self.batch_metadata else NO_SEQUENCE

    @property
    def first_data_offset(self) -> int:
        return self.batch_metadata[0].first_offset if self.batch_metadata else -1

    @property
    def last_data_offset(self) -> int:
        return self.batch_metadata[-1].last_offset if self.batch_metadata else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batch_metadata[-1].offset_delta if self.batch_metadata else 0

    def with_producer_epoch(self, producer_epoch: int) -> ProducerStateEntry:
        """A new epoch forgets the batches of the old one (Kafka's ``maybeUpdateProducerEpoch``)."""
        if producer_epoch == self.producer_epoch:
            return self
        return replace(self, producer_epoch=producer_epoch, batch_metadata=())

    def with_batch(
        self,
        producer_epoch: int,
        *,
        last_seq: int,
        last_offset: int,
        offset_delta: int,
        timestamp: int,
    ) -> ProducerStateEntry:
        """Kafka's ``addBatch``: switch epoch if needed, keep the last five batches."""
        entry = self.with_producer_epoch(producer_epoch)
        batch = BatchMetadata(
            last_seq=last_seq,
            last_offset=last_offset,
            offset_delta=offset_delta,
            timestamp=timestamp,
        )
        kept = (*entry.batch_metadata, batch)[-NUM_BATCHES_TO_RETAIN:]
        return replace(entry, batch_metadata=kept, last_timestamp=timestamp)

    def merged(self, update: ProducerStateEntry) -> ProducerStateEntry:
        """This entry after ``update`` (built by a ``ProducerAppendInfo``) is applied."""
        entry = self.with_producer_epoch(update.producer_epoch)
        kept = (*entry.batch_metadata, *update.batch_metadata)[-NUM_BATCHES_TO_RETAIN:]
        return replace(
            entry,
            batch_metadata=kept,
            coordinator_epoch=update.coordinator_epoch,
            current_txn_first_offset=update.current_txn_first_offset,
            last_timestamp=update.last_timestamp,
        )

    def find_duplicate_batch(self, batch: ProducerBatch) -> BatchMetadata | None:
        """The kept batch with the same epoch and sequence range as ``batch``, if any."""
        if batch.producer_epoch != self.producer_epoch:
            return None
        return self.batch_with_sequence_range(batch.base_sequence, batch.last_sequence)

    def batch_with_sequence_range(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        for metadata in self.batch_metadata:
            if metadata.first_seq == first_seq and metadata.last_seq == last_seq:
                return metadata
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class CompletedTxn:
    """A transaction ended by a marker: its first offset and the marker's offset (inclusive)."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool
