"""Kafka's ``ReplicaManager.appendToLocalLog``: one partition's append to its leader log.

On the event loop (``on_loop``) an append must not stall: it gives up, writing nothing, when
another thread holds the partition or its log, or when it would roll a segment, fsync or
checkpoint a leader epoch (``AppendWouldWaitError``); the ``ReplicaManager`` then appends on
an I/O thread, where the append takes the locks itself and always answers. Batches from a
client are checked for the client-only rules first (``validate_client_append``).

Thread-safety: as ``Partition.append_records_to_leader``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from storage_core.common import TopicPartition
from storage_core.errors import StorageError
from storage_core.log.log import AppendWouldWaitError
from storage_core.log.log_validator import analyze_and_validate, validate_client_batches
from storage_core.log.producer_append_info import AppendOrigin
from storage_core.log.verification_guard import VerificationGuard
from storage_core.replication.delayed_produce import ProduceResult
from storage_core.replication.partition import Partition

# The lines keep the logger they were always written with.
logger = logging.getLogger("storage_core.replication.replica_manager")


def append_to_local_log(
    get_partition: Callable[[TopicPartition], Partition],
    tp: TopicPartition,
    records: bytes,
    required_acks: int,
    *,
    on_loop: bool = False,
    expected_log_end_offset: int | None = None,
    origin: AppendOrigin = AppendOrigin.CLIENT,
    verification_guard: VerificationGuard | None = None,
) -> ProduceResult | None:
    """One partition's append. ``on_loop``: on the event loop, which it must not stall;
    None, with nothing written, when another thread holds the partition or its log, or
    when the append would roll, fsync or checkpoint an epoch (``AppendWouldWaitError``).
    Off the loop it always answers. ``expected_log_end_offset``: a compare-and-append
    (``Partition.append_records_to_leader``). ``verification_guard``: the transaction
    verification of a client's append, None when not verified (``Log.append_as_leader``)."""
    try:
        partition = get_partition(tp)
        if partition.is_leader and origin is AppendOrigin.CLIENT:
            validate_client_append(partition, records)  # else NOT_LEADER_OR_FOLLOWER first
        # Off the loop the append takes the locks itself, waiting for them.
        if on_loop and not partition.try_hold():
            return None
        try:
            info = partition.append_records_to_leader(
                records,
                required_acks=required_acks,
                disk_wait_allowed=not on_loop,
                expected_log_end_offset=expected_log_end_offset,
                origin=origin,
                verification_guard=verification_guard,
            )
        finally:
            if on_loop:
                partition.release_hold()
        return ProduceResult(info=info, log_start_offset=partition.log.log_start_offset)
    except AppendWouldWaitError:
        return None
    except StorageError as error:
        logger.info("produce failed partition=%s error=%s", tp, error)
        return ProduceResult(error=error)


def validate_client_append(partition: Partition, records: bytes) -> None:
    """Batches from a client (Kafka's ``AppendOrigin.CLIENT``): the client-only rules first,
    but a framing, size or CRC error of the same bytes is reported before them, as Kafka
    checks those first (``analyze_and_validate`` runs again in the append, at no cost on this
    failure path only)."""
    try:
        validate_client_batches(records)
    except StorageError:
        config = partition.log.config
        analyze_and_validate(
            records, max_message_bytes=config.max_message_bytes, segment_bytes=config.segment_bytes
        )
        raise
