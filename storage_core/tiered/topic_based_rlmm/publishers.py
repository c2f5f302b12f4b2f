"""How a manager appends an event to its ``__remote_log_metadata`` partition.

Every event is one record with a null key and the ``RemoteLogMetadataSerde`` bytes as value,
in its own record batch v2 (``records.memory_records_builder.build_batch``), appended with
acks=-1 (all in-sync replicas). ``publish`` returns the record's offset.

- ``ReplicaManagerPublisher`` (broker mode): ``ReplicaManager.append_records`` on the
  broker's asyncio loop, as a leader append; called from any thread **but** that loop (it
  blocks until the append is acknowledged; on the loop it raises
  ``BlockingCallOnEventLoopError``). ``RecordAppender`` names the one method it calls, so
  that ``tiered`` does not import ``replication`` (which imports ``tiered``).
- ``ProducerPublisher`` (client mode): a ``KafkaProducer`` with acks=all through the leader
  of the metadata partition, retrying through a change of that leader for about the publish
  timeout (Kafka's producer retries within ``delivery.timeout.ms``): the leader's broker
  dying must not fail the event (a copy's FINISHED, or its rollback). The producer is not
  idempotent: a retried send may append the event twice, which the cache applies as a
  no-op repeat of the same state.
- ``LeaderRoutingPublisher`` (broker mode): the ``ReplicaManagerPublisher`` where this
  broker leads the metadata partition, else a ``ProducerPublisher`` through this broker's
  own listener to the leader (a replicated metadata topic is led by several brokers; Kafka's
  broker-side manager always produces).

Thread-safety: ``publish`` may be called from several threads; each publisher serialises
what needs it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Mapping
from typing import Protocol

from storage_core.client.cluster import KafkaCluster
from storage_core.client.producer import ACKS_ALL, KafkaProducer
from storage_core.clock import SYSTEM_CLOCK, Clock
from storage_core.common import TopicPartition
from storage_core.errors import (
    LogEndOffsetMovedError,
    NotLeaderOrFollowerError,
    StorageError,
    UnknownTopicOrPartitionError,
)
from storage_core.records.memory_records_builder import build_batch
from storage_core.records.record import SimpleRecord
from storage_core.tiered.topic_based_rlmm.config import (
    DEFAULT_PUBLISH_TIMEOUT_MS,
    REMOTE_LOG_METADATA_TOPIC_NAME,
)
from storage_core.tiered.topic_based_rlmm.errors import (
    BlockingCallOnEventLoopError,
    RemoteLogMetadataPublishError,
)

MAX_RECORDS_PER_BATCH = 1_000
"""Events in one ``publish_batch`` (about 300 KiB, below the default max.message.bytes)."""
# A client-mode publish retries (a dead leader, a leader change) every this long, for about
# its timeout in all.
PUBLISH_RETRY_BACKOFF_MS = 250


class AppendedRecords(Protocol):
    """Where an append went (``LogAppendInfo``); offsets are inclusive."""

    @property
    def last_offset(self) -> int: ...


class AppendResult(Protocol):
    """One partition's append outcome (``ReplicaManager``'s ``ProduceResult``)."""

    @property
    def info(self) -> AppendedRecords | None: ...
    @property
    def error(self) -> StorageError | None: ...


class RecordAppender(Protocol):
    """Appends to partitions this broker leads (``ReplicaManager.append_records``)."""

    async def append_records(
        self,
        entries: Mapping[TopicPartition, bytes],
        *,
        required_acks: int,
        timeout_ms: int,
        expected_log_end_offsets: Mapping[TopicPartition, int] | None = None,
    ) -> Mapping[TopicPartition, AppendResult]: ...


class MetadataPublisher(Protocol):
    def publish(self, metadata_partition: int, value: bytes) -> int:
        """Append one event; its offset once acknowledged by all in-sync replicas."""


def _record(value: bytes, clock: Clock) -> SimpleRecord:
    return SimpleRecord(key=None, value=value, timestamp=clock.milliseconds())


class ReplicaManagerPublisher:
    """Leader appends through the broker's ``ReplicaManager`` on ``loop``."""

    def __init__(
        self,
        replica_manager: RecordAppender,
        loop: asyncio.AbstractEventLoop,
        *,
        timeout_ms: int = DEFAULT_PUBLISH_TIMEOUT_MS,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        if timeout_ms <= 0:
            raise ValueError(f"timeout_ms must be positive, got {timeout_ms}")
        self._replica_manager = replica_manager
        self._loop = loop
        self._timeout_ms = timeout_ms
        self._clock = clock

    def _on_loop(self) -> bool:
        try:
            return asyncio.get_running_loop() is self._loop
        except RuntimeError:
            return False

    def publish(self, metadata_partition: int, value: bytes) -> int:
        return self.publish_batch(metadata_partition, [value])

    def publish_batch(
        self,
        metadata_partition: int,
        values: list[bytes],
        *,
        expected_log_end_offset: int | None = None,
    ) -> int:
        """Append ``values`` (1 to ``MAX_RECORDS_PER_BATCH``) in one batch; the last
        offset. The metadata topic's compaction re-appends events this way, only if the
        partition's log still ends at ``expected_log_end_offset`` (``LogEndOffsetMovedError``
        otherwise, nothing written)."""
        tp = TopicPartition(REMOTE_LOG_METADATA_TOPIC_NAME, metadata_partition)
        if not 0 < len(values) <= MAX_RECORDS_PER_BATCH:
            raise ValueError(
                f"a batch holds 1 to {MAX_RECORDS_PER_BATCH} events, not {len(values)}"
            )
        if self._on_loop():
            raise BlockingCallOnEventLoopError(
                f"publishing to {tp} blocks; it was called on the broker's event loop."
                " Call it from a thread (asyncio.to_thread)."
            )
        batch = build_batch([_record(value, self._clock) for value in values])
        append = self._replica_manager.append_records(
            {tp: batch},
            required_acks=-1,
            timeout_ms=self._timeout_ms,
            expected_log_end_offsets=(
                None if expected_log_end_offset is None else {tp: expected_log_end_offset}
            ),
        )
        future = asyncio.run_coroutine_threadsafe(append, self._loop)
        try:
            results = future.result(timeout=self._timeout_ms / 1000 + 5)
        except concurrent.futures.TimeoutError as exc:
            future.cancel()
            raise RemoteLogMetadataPublishError(
                f"appending a remote log metadata event to {tp} took more than"
                f" {self._timeout_ms} ms; retry the publish"
            ) from exc
        result = results[tp]
        if isinstance(result.error, LogEndOffsetMovedError):
            raise result.error
        if result.error is not None or result.info is None:
            raise RemoteLogMetadataPublishError(
                f"appending a remote log metadata event to {tp} failed: {result.error};"
                " retry the publish"
            ) from result.error
        return result.info.last_offset


class ProducerPublisher:
    """Produces with acks=all through ``cluster`` (owned; closed by ``close``)."""

    def __init__(
        self,
        cluster: KafkaCluster,
        *,
        timeout_ms: int = DEFAULT_PUBLISH_TIMEOUT_MS,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.cluster = cluster
        self._producer = KafkaProducer(
            cluster,
            acks=ACKS_ALL,
            timeout_ms=timeout_ms,
            retries=max(1, timeout_ms // PUBLISH_RETRY_BACKOFF_MS),
            retry_backoff_ms=PUBLISH_RETRY_BACKOFF_MS,
        )
        self._clock = clock
        self._lock = threading.Lock()  # the cluster's sessions are not thread-safe

    def publish(self, metadata_partition: int, value: bytes) -> int:
        with self._lock:
            try:
                results = self._producer.send(
                    REMOTE_LOG_METADATA_TOPIC_NAME,
                    metadata_partition,
                    [_record(value, self._clock)],
                )
            except StorageError as exc:
                raise RemoteLogMetadataPublishError(
                    f"producing a remote log metadata event to"
                    f" {REMOTE_LOG_METADATA_TOPIC_NAME}-{metadata_partition} failed: {exc};"
                    " retry the publish"
                ) from exc
        if len(results) != 1 or results[0].base_offset < 0:
            raise RemoteLogMetadataPublishError(
                f"producing to {REMOTE_LOG_METADATA_TOPIC_NAME}-{metadata_partition} returned"
                f" no offset ({results}); retry the publish"
            )
        return results[0].base_offset

    def close(self) -> None:
        with self._lock:
            self.cluster.close()


class LeaderRoutingPublisher:
    """Appends locally where this broker leads the metadata partition, else produces to the
    leader through ``forwarder`` (built on first need by ``forwarder_factory``; closed by
    ``close``)."""

    def __init__(
        self,
        local: ReplicaManagerPublisher,
        forwarder_factory: Callable[[], ProducerPublisher],
    ) -> None:
        self._local = local
        self._forwarder_factory = forwarder_factory
        self._forwarder: ProducerPublisher | None = None
        self._lock = threading.Lock()

    def publish(self, metadata_partition: int, value: bytes) -> int:
        try:
            return self._local.publish(metadata_partition, value)
        except RemoteLogMetadataPublishError as exc:
            if not isinstance(
                exc.__cause__, NotLeaderOrFollowerError | UnknownTopicOrPartitionError
            ):
                raise
        return self._forwarding().publish(metadata_partition, value)

    def _forwarding(self) -> ProducerPublisher:
        with self._lock:
            if self._forwarder is None:
                self._forwarder = self._forwarder_factory()
            return self._forwarder

    def close(self) -> None:
        with self._lock:
            forwarder, self._forwarder = self._forwarder, None
        if forwarder is not None:
            forwarder.close()
