"""The transactional ids this broker coordinates, and their log ``__transaction_state``
(Kafka's ``TransactionStateManager``).

Each transactional id lives in one partition of ``__transaction_state``
(``transaction_log.partition_for``). While this broker leads a partition it keeps the
partition's ids in a cache entry stamped with the *coordinator epoch*: the partition's
leader epoch when this broker became its leader. An entry is built by replaying the
partition from its log start (the last record of an id wins, a tombstone forgets it); while
that runs, requests for its ids answer COORDINATOR_LOAD_IN_PROGRESS, and requests for ids of
partitions this broker does not lead answer NOT_COORDINATOR.

Every transition is appended as one record (``key_to_bytes`` / ``value_to_bytes``) through
the replica manager with acks=all (``min.insync.replicas`` of the topic applies) and the
transaction's timeout, as Kafka does. ``append_transit`` answers the coordinator's error for
the append (``coordinator_error_for_append``), or NOT_COORDINATOR when the partition moved or
was reloaded at another coordinator epoch meanwhile: the caller then leaves the metadata
alone (a newer coordinator owns it).

Thread safety: none. ``load_partition``'s replay runs on a worker thread (it only reads the
log); everything else runs on the coordinator's asyncio loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from kio.schema.errors import ErrorCode

from storage_core.clock import Clock
from storage_core.common import TopicPartition
from storage_core.coordinator.group.coordinator_writer import REQUIRED_ACKS_ALL, AppendOutcome
from storage_core.coordinator.transaction.transaction_log import (
    TRANSACTION_STATE_TOPIC_NAME,
    UnknownKey,
    key_to_bytes,
    partition_for,
    read_txn_record_key,
    read_txn_record_value,
    value_to_bytes,
)
from storage_core.coordinator.transaction.transaction_metadata import (
    TransactionMetadata,
    TxnTransitMetadata,
)
from storage_core.coordinator.transaction.transaction_state_manager_logic import (
    coordinator_error_for_append,
)
from storage_core.errors import StorageError
from storage_core.log.log import Log
from storage_core.log.producer_append_info import AppendOrigin
from storage_core.records import SimpleRecord, build_batch

logger = logging.getLogger(__name__)

E = ErrorCode


class TxnLogAppender(Protocol):
    """Appends to partitions this broker leads and waits for ``required_acks``."""

    async def append_records(
        self,
        entries: Mapping[TopicPartition, bytes],
        *,
        required_acks: int,
        timeout_ms: int,
        origin: AppendOrigin,
    ) -> Mapping[TopicPartition, AppendOutcome]: ...


@dataclass(slots=True)
class TxnMetadataCacheEntry:
    """The ids of one ``__transaction_state`` partition, as of ``coordinator_epoch``."""

    coordinator_epoch: int
    metadata_per_transactional_id: dict[str, TransactionMetadata] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CoordinatorEpochAndTxnMetadata:
    coordinator_epoch: int
    metadata: TransactionMetadata


class TransactionStateManager:
    """Owns the cache of transactional ids and reads / writes ``__transaction_state``.

    ``num_partitions()`` is the topic's partition count (the id -> partition mapping);
    ``get_log(p)`` returns the ``Log`` of partition ``p`` (raising a ``StorageError`` if the
    broker does not lead it); writes go through ``replica_manager`` (acks=all).
    """

    def __init__(
        self,
        *,
        num_partitions: Callable[[], int],
        get_log: Callable[[int], Log],
        replica_manager: TxnLogAppender,
        clock: Clock,
    ) -> None:
        self._num_partitions = num_partitions
        self._get_log = get_log
        self._replica_manager = replica_manager
        self._clock = clock
        self._cache: dict[int, TxnMetadataCacheEntry] = {}
        self._loading: dict[int, int] = {}  # partition -> coordinator epoch being loaded

    # ------------------------------------------------------------------ lookups
    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions)

    @property
    def num_partitions(self) -> int:
        """``__transaction_state``'s partition count: the topic's once it exists (created by
        the first FindCoordinator for a transactional id), else the configured one."""
        return self._num_partitions()

    @property
    def is_loading(self) -> bool:
        return bool(self._loading)

    def owned_partitions(self) -> dict[int, int]:
        """Loaded partitions and their coordinator epochs."""
        return {p: entry.coordinator_epoch for p, entry in self._cache.items()}

    def get_transaction_state(
        self, transactional_id: str
    ) -> ErrorCode | CoordinatorEpochAndTxnMetadata | None:
        """The id's metadata (None: unknown id of a partition this broker coordinates), or
        COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR (Kafka's ``getTransactionState``)."""
        partition = self.partition_for(transactional_id)
        if partition in self._loading:
            return E.coordinator_load_in_progress
        entry = self._cache.get(partition)
        if entry is None:
            return E.not_coordinator
        metadata = entry.metadata_per_transactional_id.get(transactional_id)
        if metadata is None:
            return None
        return CoordinatorEpochAndTxnMetadata(entry.coordinator_epoch, metadata)

    def put_transaction_state_if_not_exists(
        self, metadata: TransactionMetadata
    ) -> ErrorCode | CoordinatorEpochAndTxnMetadata:
        """Cache a new id's metadata, or return the one cached first."""
        state = self.get_transaction_state(metadata.transactional_id)
        if isinstance(state, ErrorCode) or state is not None:
            return state
        entry = self._cache[self.partition_for(metadata.transactional_id)]
        entry.metadata_per_transactional_id[metadata.transactional_id] = metadata
        return CoordinatorEpochAndTxnMetadata(entry.coordinator_epoch, metadata)

    def all_metadata(self) -> Iterator[tuple[int, TransactionMetadata]]:
        """Every cached id with its coordinator epoch."""
        for entry in list(self._cache.values()):
            for metadata in list(entry.metadata_per_transactional_id.values()):
                yield entry.coordinator_epoch, metadata

    def is_current(self, transactional_id: str, coordinator_epoch: int) -> bool:
        """True if this broker still coordinates the id at ``coordinator_epoch``."""
        entry = self._cache.get(self.partition_for(transactional_id))
        return (
            entry is not None
            and entry.coordinator_epoch == coordinator_epoch
            and transactional_id in entry.metadata_per_transactional_id
        )

    # ------------------------------------------------------------------ loading
    def begin_loading(self, partition: int, coordinator_epoch: int) -> None:
        """Mark ``partition`` as loading at ``coordinator_epoch`` (its ids answer
        COORDINATOR_LOAD_IN_PROGRESS until ``finish_loading``)."""
        self._loading[partition] = coordinator_epoch

    def replay(self, partition: int) -> dict[str, TransactionMetadata]:
        """Every id of ``partition`` as its log holds it (any thread: it only reads)."""
        log = self._get_log(partition)
        loaded: dict[str, TransactionMetadata] = {}
        for batch in log.read_batches(log.log_start_offset):
            batch.ensure_valid()
            for record in batch.records():
                if record.key is None:
                    raise StorageError(
                        f"record at offset {record.offset} of {log.topic_partition} has no"
                        " key: a transaction state record always has one"
                    )
                key = read_txn_record_key(record.key)
                if isinstance(key, UnknownKey):
                    logger.warning(
                        "unknown transaction log key version=%d partition=%s offset=%d: skipped",
                        key.version,
                        log.topic_partition,
                        record.offset,
                    )
                    continue
                metadata = read_txn_record_value(key.transactional_id, record.value)
                if metadata is None:
                    loaded.pop(key.transactional_id, None)
                else:
                    loaded[key.transactional_id] = metadata
        return loaded

    def finish_loading(
        self, partition: int, coordinator_epoch: int, loaded: dict[str, TransactionMetadata]
    ) -> bool:
        """Install a replayed partition, unless it was unloaded or reloaded at another
        epoch meanwhile (then False and nothing changes)."""
        if self._loading.get(partition) != coordinator_epoch:
            return False
        del self._loading[partition]
        previous = self._cache.get(partition)
        if previous is not None:
            logger.warning(
                "replaced transaction metadata partition=%s-%d previous_epoch=%d epoch=%d",
                TRANSACTION_STATE_TOPIC_NAME,
                partition,
                previous.coordinator_epoch,
                coordinator_epoch,
            )
        self._cache[partition] = TxnMetadataCacheEntry(coordinator_epoch, loaded)
        return True

    def fail_loading(self, partition: int, coordinator_epoch: int) -> None:
        """A replay that failed: the partition's ids answer NOT_COORDINATOR."""
        if self._loading.get(partition) == coordinator_epoch:
            del self._loading[partition]

    def remove_partition(self, partition: int) -> int:
        """Forget ``partition`` (its leadership moved); returns how many ids it held."""
        self._loading.pop(partition, None)
        entry = self._cache.pop(partition, None)
        return 0 if entry is None else len(entry.metadata_per_transactional_id)

    def remove_if_dead(self, transactional_id: str, coordinator_epoch: int) -> None:
        """Drop an expired id after its tombstone was written."""
        entry = self._cache.get(self.partition_for(transactional_id))
        if entry is not None and entry.coordinator_epoch == coordinator_epoch:
            entry.metadata_per_transactional_id.pop(transactional_id, None)

    # ------------------------------------------------------------------ writing
    async def append_transit(
        self, transactional_id: str, coordinator_epoch: int, transit: TxnTransitMetadata
    ) -> ErrorCode:
        """Write ``transit`` for the id; NONE once every in-sync replica has it.

        NOT_COORDINATOR if the id's partition is not (or no longer) coordinated here at
        ``coordinator_epoch``, before or after the write."""
        if not self.is_current(transactional_id, coordinator_epoch):
            return E.not_coordinator
        errors = await self._append(
            self.partition_for(transactional_id),
            [(key_to_bytes(transactional_id), value_to_bytes(transit))],
            timeout_ms=transit.txn_timeout_ms,
        )
        error = coordinator_error_for_append(errors)
        if error is E.none and not self.is_current(transactional_id, coordinator_epoch):
            logger.info(
                "transaction state written but the coordinator moved meanwhile"
                " transactional_id=%s epoch=%d",
                transactional_id,
                coordinator_epoch,
            )
            return E.not_coordinator
        return error

    async def append_tombstones(
        self, partition: int, transactional_ids: Sequence[str], timeout_ms: int
    ) -> ErrorCode:
        """Write one tombstone per id in one batch of ``partition``."""
        return coordinator_error_for_append(
            await self._append(
                partition,
                [(key_to_bytes(txn_id), None) for txn_id in transactional_ids],
                timeout_ms=timeout_ms,
            )
        )

    async def _append(
        self, partition: int, records: Sequence[tuple[bytes, bytes | None]], *, timeout_ms: int
    ) -> ErrorCode:
        tp = TopicPartition(TRANSACTION_STATE_TOPIC_NAME, partition)
        now = self._clock.milliseconds()
        batch = build_batch(
            [SimpleRecord(key=key, value=value, timestamp=now) for key, value in records]
        )
        try:
            results = await self._replica_manager.append_records(
                {tp: batch},
                required_acks=REQUIRED_ACKS_ALL,
                timeout_ms=timeout_ms,
                origin=AppendOrigin.COORDINATOR,
            )
        except StorageError as exc:
            return _error_code(exc)
        result = results.get(tp)
        if result is None:
            return E.unknown_server_error
        if result.error is None:
            return E.none
        logger.warning("transaction state not written partition=%s error=%s", tp, result.error)
        return _error_code(result.error)


def _error_code(error: StorageError) -> ErrorCode:
    try:
        return ErrorCode[error.error_code]
    except KeyError:
        return E.unknown_server_error
