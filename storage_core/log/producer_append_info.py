"""Validation of one append's batches against a producer's state (Kafka's
``ProducerAppendInfo``), and where an append comes from (``AppendOrigin``).

A leader checks every incoming batch against the producer's ``ProducerStateEntry``: a stale
epoch or a gap in the sequence numbers is refused; a follower or a reload refuses nothing.

Thread safety: none; built and used under the owning ``Log``'s lock.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import replace

from storage_core.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from storage_core.log.producer_state_entry import (
    CompletedTxn,
    ProducerBatch,
    ProducerStateEntry,
    in_sequence,
)
from storage_core.log.verification_guard import VerificationStateEntry
from storage_core.records import NO_PRODUCER_EPOCH, NO_SEQUENCE
from storage_core.records.end_transaction_marker import ControlRecordType, EndTransactionMarker

# Its lines keep the logger name they had in producer_state.py.
logger = logging.getLogger("storage_core.log.producer_state")


class AppendOrigin(enum.Enum):
    """Where an append comes from, which decides how much is checked (Kafka's ``AppendOrigin``).

    ``CLIENT``: a produce request; epochs, sequences and duplicates are checked.
    ``REPLICATION``: a follower copying the leader, or a log being reloaded; nothing is refused.
    ``COORDINATOR``: a coordinator's own append on a leader (transaction markers of
    WriteTxnMarkers, group records); epochs are checked, sequences and duplicates are not.
    """

    CLIENT = "client"
    REPLICATION = "replication"
    COORDINATOR = "coordinator"


class ProducerAppendInfo:
    """Validates the batches of one producer within one append (Kafka's ``ProducerAppendInfo``).

    Built from the producer's entry before the append; each batch is checked against the
    entry as updated by the batches before it, and ``to_entry`` gives the update to apply
    once the append is written. With ``AppendOrigin.CLIENT`` a bad batch raises
    ``InvalidProducerEpochError``, ``OutOfOrderSequenceError``, ``InvalidTxnStateError`` or
    ``TransactionCoordinatorFencedError``; with ``REPLICATION`` only the transaction state
    error is raised (as in Kafka) and a stale epoch is logged. ``verification_state_entry``:
    the producer's entry while it waits for transaction verification; a client batch with a
    sequence above its lowest is out of order.
    """

    def __init__(
        self,
        partition: str,
        producer_id: int,
        current_entry: ProducerStateEntry,
        origin: AppendOrigin,
        verification_state_entry: VerificationStateEntry | None = None,
    ) -> None:
        self.partition = partition
        self.producer_id = producer_id
        self.current_entry = current_entry
        self.origin = origin
        self.verification_state_entry = verification_state_entry
        self._updated = replace(current_entry, producer_id=producer_id, batch_metadata=())
        self.started_transactions: list[int] = []
        # a transactional batch or a marker was appended: the verification entry goes
        self.saw_transactional_batch = False

    def to_entry(self) -> ProducerStateEntry:
        return self._updated

    def append(self, batch: ProducerBatch) -> CompletedTxn | None:
        """Check ``batch`` and fold it into the pending update."""
        if batch.is_transactional or batch.is_control:
            self.saw_transactional_batch = True
        if batch.is_control:
            if batch.end_txn_marker is None:
                return None  # an empty control batch: the transaction was cleaned away
            return self.append_end_txn_marker(
                batch.end_txn_marker, batch.producer_epoch, batch.base_offset
            )
        self.append_data_batch(
            epoch=batch.producer_epoch,
            first_seq=batch.base_sequence,
            last_seq=batch.last_sequence,
            last_timestamp=batch.max_timestamp,
            first_offset=batch.base_offset,
            last_offset=batch.last_offset,
            is_transactional=batch.is_transactional,
        )
        if batch.is_transactional:
            # the verified batch is in: the batches after it in this append follow it
            self.verification_state_entry = None
        return None

    def append_data_batch(
        self,
        *,
        epoch: int,
        first_seq: int,
        last_seq: int,
        last_timestamp: int,
        first_offset: int,
        last_offset: int,
        is_transactional: bool,
    ) -> None:
        self._check_producer_epoch(epoch, first_offset)
        if self.origin is AppendOrigin.CLIENT:
            self._check_sequence(epoch, first_seq, first_offset)
        self._updated = self._updated.with_batch(
            epoch,
            last_seq=last_seq,
            last_offset=last_offset,
            offset_delta=last_offset - first_offset,
            timestamp=last_timestamp,
        )
        open_txn = self._updated.current_txn_first_offset
        if open_txn is not None and not is_transactional:
            raise InvalidTxnStateError(
                f"Expected transactional write from producer {self.producer_id} at offset"
                f" {first_offset} in partition {self.partition}: it has a transaction open"
                f" since offset {open_txn}; end the transaction before writing outside it"
            )
        if open_txn is None and is_transactional:
            self._updated = replace(self._updated, current_txn_first_offset=first_offset)
            self.started_transactions.append(first_offset)

    def append_end_txn_marker(
        self, marker: EndTransactionMarker, producer_epoch: int, offset: int
    ) -> CompletedTxn | None:
        self._check_producer_epoch(producer_epoch, offset)
        self._check_coordinator_epoch(marker, offset)
        first = self._updated.current_txn_first_offset
        completed = (
            None
            if first is None
            else CompletedTxn(
                producer_id=self.producer_id,
                first_offset=first,
                last_offset=offset,
                is_aborted=marker.control_type is ControlRecordType.ABORT,
            )
        )
        self._updated = replace(
            self._updated.with_producer_epoch(producer_epoch),
            current_txn_first_offset=None,
            coordinator_epoch=marker.coordinator_epoch,
            last_timestamp=marker.timestamp,
        )
        return completed

    def _check_producer_epoch(self, producer_epoch: int, offset: int) -> None:
        current = self._updated.producer_epoch
        if producer_epoch >= current:
            return
        message = (
            f"Epoch of producer {self.producer_id} at offset {offset} in {self.partition} is"
            f" {producer_epoch}, which is smaller than the last seen epoch {current}"
        )
        if self.origin is AppendOrigin.REPLICATION:
            logger.warning("%s", message)
            return
        raise InvalidProducerEpochError(
            f"{message}; a newer producer with this id has fenced this one"
        )

    def _check_sequence(self, producer_epoch: int, first_seq: int, offset: int) -> None:
        verifying = self.verification_state_entry
        if verifying is not None and first_seq > verifying.lowest_sequence:
            raise OutOfOrderSequenceError(
                f"Out of order sequence number for producer {self.producer_id} at offset"
                f" {offset} in partition {self.partition}: {first_seq} (incoming seq. number),"
                f" {verifying.lowest_sequence} (earliest seen sequence); the batch with the"
                " earliest sequence must be appended first"
            )
        updated = self._updated
        if producer_epoch != updated.producer_epoch:
            # A new epoch must start at sequence 0, unless the producer is unknown here
            # (its batches were all removed by retention, or it never wrote): any sequence.
            if first_seq != 0 and updated.producer_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"Invalid sequence number for new epoch of producer {self.producer_id} at"
                    f" offset {offset} in partition {self.partition}: {producer_epoch} (request"
                    f" epoch), {first_seq} (seq. number), {updated.producer_epoch} (current"
                    " producer epoch); a new epoch must start at sequence 0"
                )
            return
        if not updated.is_empty:
            current_last_seq = updated.last_seq
        elif producer_epoch == self.current_entry.producer_epoch:
            current_last_seq = self.current_entry.last_seq
        else:
            current_last_seq = NO_SEQUENCE
        # With no known epoch (all of the producer's batches were deleted by retention or
        # DeleteRecords) any sequence number is accepted.
        if self.current_entry.producer_epoch == NO_PRODUCER_EPOCH or in_sequence(
            current_last_seq, first_seq
        ):
            return
        raise OutOfOrderSequenceError(
            f"Out of order sequence number for producer {self.producer_id} at offset {offset}"
            f" in partition {self.partition}: {first_seq} (incoming seq. number),"
            f" {current_last_seq} (current end sequence number); the producer must resend"
            " from the first unacknowledged batch"
        )

    def _check_coordinator_epoch(self, marker: EndTransactionMarker, offset: int) -> None:
        current = self._updated.coordinator_epoch
        if current <= marker.coordinator_epoch:
            return
        message = (
            f"Invalid coordinator epoch for producer {self.producer_id} at offset {offset} in"
            f" partition {self.partition}: {marker.coordinator_epoch} (zombie), {current}"
            " (current)"
        )
        if self.origin is AppendOrigin.REPLICATION:
            logger.info("%s", message)
            return
        raise TransactionCoordinatorFencedError(message)
