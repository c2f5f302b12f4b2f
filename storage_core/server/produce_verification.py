"""Transaction verification before a produce's append (KIP-890 part 1): the part of Kafka's
``ReplicaManager.handleProduceAppend`` that runs before ``appendRecords``.

For a produce with a transactional id whose partitions carry transactional batches, each
partition where the producer has no transaction ongoing gets a verification guard
(``transaction_verification``), and the transaction coordinator is asked once for all of
them (``AddPartitionsToTxnManager``). The partitions it does not confirm are answered
without appending, with the error translated as Kafka does for producers:

    INVALID_TXN_STATE                    "Partition was not added to the transaction"
    CONCURRENT_TRANSACTIONS, NETWORK_EXCEPTION, COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
                                         NOT_ENOUGH_REPLICAS (retriable for every client,
                                         and no metadata refresh)
    anything else                        as it is

The others are appended with their guards: a marker of the producer written meanwhile
clears its verification and the append fails with INVALID_TXN_STATE. A produce whose
transactional batches carry more than one producer id is refused on every partition
(INVALID_PRODUCER_ID_MAPPING). Without a transactional id nothing is asked, and the log
refuses a transactional batch that opens a transaction (Kafka's behaviour).

With ``transaction.partition.verification.enable=false`` nothing is verified (Kafka before
3.6): the broker then has no ``AddPartitionsToTxnManager``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast

from kio.schema.errors import ErrorCode

from storage_core.common import TopicPartition
from storage_core.errors import InvalidTxnStateError, NotEnoughReplicasError, StorageError
from storage_core.log.verification_guard import VerificationGuard
from storage_core.replication.transaction_verification import (
    maybe_start_transaction_verification,
    transactional_batches,
)
from storage_core.server.broker_services import BrokerServices

E = ErrorCode

RETRIABLE_VERIFICATION_ERRORS = frozenset(
    {
        E.concurrent_transactions,
        E.network_exception,
        E.coordinator_load_in_progress,
        E.coordinator_not_available,
        E.not_coordinator,
    }
)
# Produce v11 added TRANSACTION_ABORTABLE (KIP-890): older producers get INVALID_TXN_STATE
GENERIC_ERRORS_MIN_PRODUCE_VERSION = 11


@dataclass(frozen=True, slots=True, kw_only=True)
class ProduceVerification:
    """``errors``: partitions answered with these, not appended. ``guards``: what the append
    of the others carries (``ReplicaManager.append_to_leaders``); None: not verified."""

    errors: Mapping[TopicPartition, StorageError]
    guards: Mapping[TopicPartition, VerificationGuard] | None


NOT_VERIFIED = ProduceVerification(errors={}, guards=None)
NOTHING_TO_VERIFY = ProduceVerification(errors={}, guards={})


class TransactionVerificationError(StorageError):
    """A coordinator's answer to a verification, passed on to the producer as it is."""


@functools.cache
def _error_class(error: ErrorCode) -> type[StorageError]:
    if error == E.invalid_txn_state:
        return InvalidTxnStateError
    name = f"{error.name.title().replace('_', '')}Error"
    return cast(
        "type[StorageError]",
        type(name, (TransactionVerificationError,), {"error_code": error.name}),
    )


def produce_error(error: ErrorCode) -> StorageError:
    """The error a partition of the produce is answered with (the table above)."""
    name = error.name.upper()
    if error == E.invalid_txn_state:
        return InvalidTxnStateError("Partition was not added to the transaction")
    if error in RETRIABLE_VERIFICATION_ERRORS:
        return NotEnoughReplicasError(
            "Unable to verify the partition has been added to the transaction. Underlying"
            f" error: {name}"
        )
    return _error_class(error)(f"Transaction verification failed: {name}")


async def verify_produce(
    services: BrokerServices,
    transactional_id: str | None,
    entries: Mapping[TopicPartition, bytes],
    *,
    api_version: int,
) -> ProduceVerification:
    """Verify the partitions of a produce that need it (see the module docstring)."""
    manager = services.add_partitions_to_txn_manager
    if manager is None:
        return NOT_VERIFIED
    if transactional_id is None:  # not scanned: the log refuses a transaction it would open
        return NOTHING_TO_VERIFY
    batches = transactional_batches(entries)
    if not batches.producers:
        return NOTHING_TO_VERIFY
    if len(batches.producers) > 1:
        error = _error_class(E.invalid_producer_id_mapping)(
            "Transactional records contained more than one producer ID"
        )
        return ProduceVerification(errors=dict.fromkeys(entries, error), guards={})
    ((producer_id, producer_epoch),) = batches.producers
    errors: dict[TopicPartition, StorageError] = {}
    guards: dict[TopicPartition, VerificationGuard] = {}
    replica_manager = services.replica_manager
    for tp, base_sequence in batches.first_sequences.items():
        start = functools.partial(
            maybe_start_transaction_verification,
            replica_manager.get_partition,
            tp,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
        )
        try:
            # on the loop unless an I/O thread holds the log: then wait there, not here
            guard = start(wait=False) or await replica_manager.run_io(start)
        except StorageError as exc:
            errors[tp] = exc
            continue
        if guard is not None and guard != VerificationGuard.SENTINEL:
            guards[tp] = guard
    if guards:
        unverified = await manager.verify_transaction(
            transactional_id,
            producer_id,
            producer_epoch,
            guards,
            generic_errors=api_version >= GENERIC_ERRORS_MIN_PRODUCE_VERSION,
        )
        errors.update({tp: produce_error(error) for tp, error in unverified.items()})
    return ProduceVerification(errors=errors, guards=guards)
