"""``TransactionMarkerChannelManager``: gets a transaction's COMMIT / ABORT markers written on
the leaders of its partitions (Kafka's class of that name, with its
``TransactionMarkerRequestCompletionHandler``).

``add_txn_markers_to_send`` groups the transaction's partitions by their current leader in
the broker's ``MetadataCache`` and queues one marker per leader. One sender thread per
destination broker drains everything queued for it into one WriteTxnMarkers v1 request (at
most ``MARKERS_PER_REQUEST_MAX`` markers), sent over the inter-broker listener with the
broker's own client security (TLS / SASL as ``inter_broker_client_security`` builds it), on
one blocking connection it keeps open. Each partition's answer is handled by the table of
``transaction_marker_entries``: written partitions leave the transaction's pending set;
retriable ones (and every partition of a request whose connection failed) wait
``retry_backoff_ms`` and are grouped again by their leader then, so they follow a leader that
moved; a partition without a leader (or whose leader has no endpoint yet) waits the same
way, or until ``maybe_retry_now`` (the metadata changed). A fenced marker (another producer
epoch or coordinator epoch wrote since) stops the transaction's markers and is reported to
``on_failed``; CLUSTER_AUTHORIZATION_FAILED is logged as an error naming the ACL to grant,
reported once, and retried (the markers go out once an operator grants CLUSTER_ACTION).

Markers for partitions this broker leads itself go to ``local_writer`` when one is given (the
broker appends them in place instead of sending a request to itself); their answers are
handled by the same table.

When no partition of a transaction is left, ``on_complete(transactional_id)`` is called once
(the coordinator then appends its CompleteCommit / CompleteAbort). Adding markers for a
transactional id that has some pending replaces them (Kafka's ``transactionsWithPendingMarkers``):
answers to the older ones are ignored. ``remove_markers_for_txn_topic_partition`` drops
everything of the transactions of a ``__transaction_state`` partition whose leadership this
broker lost; their callbacks are never called.

Thread-safety: every method may be called from any thread (the broker's event loop included:
none blocks on the network). State is guarded by one lock; callbacks run outside it, on the
thread that finished the transaction (a sender thread, the retry thread, or the caller of
``add_txn_markers_to_send`` when every partition is already gone) and must not block long.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from kio.schema.errors import ErrorCode

from storage_core.client.connection import ConnectionConfig
from storage_core.common import TopicPartition
from storage_core.coordinator.transaction.transaction_marker_entries import (
    ClusterMetadata,
    MarkerOutcome,
    TxnMarkerEntry,
    marker_destinations,
    marker_outcome,
)
from storage_core.coordinator.transaction.transaction_marker_sender import DestinationSender
from storage_core.coordinator.transaction.transaction_results import TxnMarkers
from storage_core.security.client_transport import PLAINTEXT_CLIENT, ClientSecurityConfig

logger = logging.getLogger(__name__)

MARKERS_PER_REQUEST_MAX = 1000
DEFAULT_REQUEST_TIMEOUT_MS = 30_000
DEFAULT_RETRY_BACKOFF_MS = 100
UNAUTHORIZED_RETRY_BACKOFF_MS = 1000
_CONNECT_TIMEOUT_MS = 10_000
_JOIN_TIMEOUT_S = 30.0

CompleteCallback = Callable[[str], None]
FailedCallback = Callable[[str, ErrorCode], None]
MarkerDone = Callable[[dict[TopicPartition, ErrorCode] | None, str | None], None]


class LocalMarkerWriter(Protocol):
    """Writes markers on partitions this broker leads without a request to itself; calls
    ``on_done(errors, None)`` with each partition's error, or ``on_done(None, reason)``."""

    def submit(self, entry: TxnMarkerEntry, on_done: MarkerDone) -> None: ...


@dataclass(eq=False, slots=True, kw_only=True)
class _PendingTxn:
    """A transaction whose markers are being written (Kafka's ``PendingCompleteTxn``, with
    the partitions not written yet). Guarded by the manager's lock."""

    marker: TxnMarkerEntry  # all its partitions
    txn_topic_partition: int
    remaining: set[TopicPartition]
    reported_unauthorized: bool = False

    @property
    def transactional_id(self) -> str:
        return self.marker.transactional_id


@dataclass(frozen=True, slots=True)
class _Queued:
    pending: _PendingTxn
    entry: TxnMarkerEntry  # the partitions this marker is for


@dataclass(slots=True)
class _Outcomes:
    """Callbacks to run once the lock is released."""

    completed: list[str] = field(default_factory=list)
    failed: list[tuple[str, ErrorCode]] = field(default_factory=list)
    local: list[_Queued] = field(default_factory=list)  # markers this broker writes itself


class TransactionMarkerChannelManager:
    def __init__(
        self,
        *,
        broker_id: int,
        metadata_cache: ClusterMetadata,
        inter_broker_listener_name: str,
        on_complete: CompleteCallback,
        on_failed: FailedCallback | None = None,
        security: ClientSecurityConfig = PLAINTEXT_CLIENT,
        request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS,
        retry_backoff_ms: int = DEFAULT_RETRY_BACKOFF_MS,
        local_writer: LocalMarkerWriter | None = None,
    ) -> None:
        if request_timeout_ms <= 0 or retry_backoff_ms < 0:
            raise ValueError(
                f"request_timeout_ms must be positive and retry_backoff_ms >= 0, got"
                f" {request_timeout_ms} and {retry_backoff_ms}"
            )
        self.broker_id = broker_id
        self._metadata_cache = metadata_cache
        self._listener_name = inter_broker_listener_name
        self._on_complete = on_complete
        self._on_failed = on_failed or (lambda _id, _error: None)
        self._local_writer = local_writer
        self.connection_config = ConnectionConfig(
            client_id=f"broker-{broker_id}-txn-marker-sender",
            connect_timeout_ms=min(_CONNECT_TIMEOUT_MS, request_timeout_ms),
            request_timeout_ms=request_timeout_ms,
            security=security,
        )
        self._retry_backoff_s = retry_backoff_ms / 1000
        self._lock = threading.Condition()
        self._pending: dict[str, _PendingTxn] = {}
        self._queues: dict[int, deque[_Queued]] = {}
        self._delayed: list[tuple[float, _Queued]] = []  # (due, marker), Kafka's unknown queue
        self._senders: dict[int, DestinationSender[_Queued]] = {}
        self._stopping = False
        self._started = False
        self.requests_sent = 0  # WriteTxnMarkers requests answered or failed, for tests
        self._retry_thread = threading.Thread(
            target=self._run_retries, name=f"TxnMarkerSenderThread-{broker_id}", daemon=True
        )

    # ------------------------------------------------------------------ public API
    def start(self) -> None:
        with self._lock:
            self._started = True
            for sender in self._senders.values():
                sender.start()
        self._retry_thread.start()

    def add_txn_markers_to_send(
        self, coordinator_epoch: int, markers: TxnMarkers, *, txn_topic_partition: int
    ) -> None:
        """Write ``markers`` on the leaders of its partitions, as the coordinator of
        ``txn_topic_partition`` (of ``__transaction_state``) at ``coordinator_epoch``."""
        marker = TxnMarkerEntry(
            transactional_id=markers.transactional_id,
            producer_id=markers.producer_id,
            producer_epoch=markers.producer_epoch,
            coordinator_epoch=coordinator_epoch,
            result=markers.result,
            topic_partitions=markers.topic_partitions,
        )
        pending = _PendingTxn(
            marker=marker,
            txn_topic_partition=txn_topic_partition,
            remaining=set(marker.topic_partitions),
        )
        outcomes = _Outcomes()
        with self._lock:
            if self._stopping:
                return
            previous = self._pending.get(marker.transactional_id)
            if previous is not None:
                logger.info(
                    "replaced pending markers transactional_id=%s previous_epoch=%d",
                    marker.transactional_id,
                    previous.marker.producer_epoch,
                )
            self._pending[marker.transactional_id] = pending
            self._enqueue_locked(_Queued(pending, marker), outcomes)
        self._report(outcomes)

    def remove_markers_for_txn_topic_partition(self, txn_topic_partition: int) -> None:
        """Forget every transaction of ``txn_topic_partition`` (its leadership moved): their
        queued markers are dropped, answers still in flight ignored, callbacks never run."""
        with self._lock:
            removed = [
                txn_id
                for txn_id, pending in self._pending.items()
                if pending.txn_topic_partition == txn_topic_partition
            ]
            for txn_id in removed:
                del self._pending[txn_id]
            for queue in self._queues.values():
                kept = [q for q in queue if q.pending.txn_topic_partition != txn_topic_partition]
                queue.clear()
                queue.extend(kept)
            self._delayed = [
                (due, q)
                for due, q in self._delayed
                if q.pending.txn_topic_partition != txn_topic_partition
            ]
        if removed:
            logger.info(
                "removed pending markers txn_topic_partition=__transaction_state-%d"
                " transactional_ids=%s",
                txn_topic_partition,
                sorted(removed),
            )

    def maybe_retry_now(self) -> None:
        """Look again at once for the leaders of the markers waiting (the metadata changed)."""
        with self._lock:
            self._delayed = [(0.0, q) for _, q in self._delayed]
            self._lock.notify_all()

    def num_txns_with_pending_markers(self) -> int:
        with self._lock:
            return len(self._pending)

    def queued_markers(self, broker: int) -> list[TxnMarkerEntry]:
        """The markers waiting to be sent to ``broker`` (Kafka's ``queueForBroker``)."""
        with self._lock:
            return [queued.entry for queued in self._queues.get(broker, ())]

    def waiting_markers(self) -> list[TxnMarkerEntry]:
        """The markers waiting for a leader or a retry (Kafka's unknown-broker queue)."""
        with self._lock:
            return [queued.entry for _, queued in self._delayed]

    def shutdown(self) -> None:
        """Stop sending and close the connections; markers not written are dropped (the
        coordinator that loads the transaction partition next sends them again)."""
        with self._lock:
            self._stopping = True
            self._pending.clear()
            self._queues.clear()
            self._delayed.clear()
            senders = list(self._senders.values())
            self._lock.notify_all()
        for sender in senders:
            sender.initiate_close()
        if self._retry_thread.is_alive():
            self._retry_thread.join(_JOIN_TIMEOUT_S)
        for sender in senders:
            sender.join()

    # ------------------------------------------------------------------ queueing (locked)
    def _enqueue_locked(self, queued: _Queued, outcomes: _Outcomes) -> None:
        """Kafka's ``addTxnMarkersToBrokerQueue``: each partition to its leader's queue."""
        pending = queued.pending
        if self._pending.get(pending.transactional_id) is not pending or self._stopping:
            return  # cancelled or replaced meanwhile
        destinations = marker_destinations(
            self._metadata_cache.image(), queued.entry.topic_partitions, self._listener_name
        )
        if destinations.deleted:
            logger.info(
                "skipping markers of deleted partitions transactional_id=%s partitions=%s",
                pending.transactional_id,
                sorted(str(tp) for tp in destinations.deleted),
            )
            pending.remaining.difference_update(destinations.deleted)
        if destinations.unknown_leader:
            self._delay_locked(
                _Queued(pending, queued.entry.with_partitions(destinations.unknown_leader)),
                self._retry_backoff_s,
            )
        for broker, partitions in destinations.by_broker.items():
            marker = _Queued(pending, queued.entry.with_partitions(partitions))
            if broker == self.broker_id and self._local_writer is not None:
                outcomes.local.append(marker)
                continue
            self._queues.setdefault(broker, deque()).append(marker)
            self._sender_locked(broker)
        self._maybe_complete_locked(pending, outcomes)
        self._lock.notify_all()

    def _delay_locked(self, queued: _Queued, backoff_s: float) -> None:
        self._delayed.append((time.monotonic() + backoff_s, queued))
        self._lock.notify_all()

    def _maybe_complete_locked(self, pending: _PendingTxn, outcomes: _Outcomes) -> None:
        if not pending.remaining and self._pending.get(pending.transactional_id) is pending:
            del self._pending[pending.transactional_id]
            outcomes.completed.append(pending.transactional_id)

    def _abandon_locked(self, pending: _PendingTxn, error: ErrorCode, outcomes: _Outcomes) -> None:
        """Kafka's ``removeMarkersForTxn``: no more markers of this transaction."""
        if self._pending.get(pending.transactional_id) is pending:
            del self._pending[pending.transactional_id]
            outcomes.failed.append((pending.transactional_id, error))

    def _sender_locked(self, broker: int) -> DestinationSender[_Queued]:
        sender = self._senders.get(broker)
        if sender is None:
            sender = DestinationSender(self, broker)
            self._senders[broker] = sender
            if self._started:
                sender.start()
        return sender

    def _report(self, outcomes: _Outcomes) -> None:
        for queued in outcomes.local:
            self._write_locally(queued)
        for txn_id in outcomes.completed:
            logger.debug("markers written transactional_id=%s", txn_id)
            try:
                self._on_complete(txn_id)
            except Exception:
                logger.exception("completion callback failed transactional_id=%s", txn_id)
        for txn_id, error in outcomes.failed:
            try:
                self._on_failed(txn_id, error)
            except Exception:
                logger.exception("failure callback failed transactional_id=%s", txn_id)

    def _write_locally(self, queued: _Queued) -> None:
        writer = self._local_writer
        if writer is None:
            return

        def done(errors: dict[TopicPartition, ErrorCode] | None, reason: str | None) -> None:
            if errors is None:
                self.handle_failure(self.broker_id, [queued], reason or "no answer")
            else:
                self.handle_response(self.broker_id, [queued], [errors])

        writer.submit(queued.entry, done)

    def is_stopping(self) -> bool:
        return self._stopping

    # ------------------------------------------------------------------ threads
    def _run_retries(self) -> None:
        """Markers that wait (no leader, a retriable answer, a lost connection) go back to
        their leaders' queues when due."""
        while True:
            with self._lock:
                while not self._stopping:
                    now = time.monotonic()
                    if any(due <= now for due, _ in self._delayed):
                        break
                    earliest = min((due for due, _ in self._delayed), default=None)
                    self._lock.wait(None if earliest is None else earliest - now)
                if self._stopping:
                    return
            self.retry_due_markers()

    def retry_due_markers(self) -> None:
        """Group the waiting markers that are due by their leaders again (the retry thread's
        round, callable directly when the thread is not started)."""
        outcomes = _Outcomes()
        with self._lock:
            now = time.monotonic()
            due_now = [q for due, q in self._delayed if due <= now]
            self._delayed = [(due, q) for due, q in self._delayed if due > now]
            for queued in due_now:
                self._enqueue_locked(queued, outcomes)
        self._report(outcomes)

    def take_batch(self, broker: int) -> list[_Queued] | None:
        """The markers queued for ``broker`` (waits for some); None once stopping."""
        with self._lock:
            queue = self._queues.setdefault(broker, deque())
            while not queue and not self._stopping:
                self._lock.wait()
            if self._stopping:
                return None
            count = min(len(queue), MARKERS_PER_REQUEST_MAX)
            return [queue.popleft() for _ in range(count)]

    def endpoint(self, broker: int) -> tuple[str, int] | None:
        registration = self._metadata_cache.image().brokers.get(broker)
        endpoint = registration.endpoint(self._listener_name) if registration else None
        return None if endpoint is None else (endpoint.host, endpoint.port)

    def handle_failure(self, broker: int, batch: list[_Queued], reason: str) -> None:
        """The request got no answer: every marker waits and goes to its leader again."""
        logger.warning(
            "WriteTxnMarkers to broker %d failed, retrying markers=%d reason=%s",
            broker,
            len(batch),
            reason,
        )
        with self._lock:
            self.requests_sent += 1
            for queued in batch:
                self._delay_locked(queued, self._retry_backoff_s)

    def handle_response(
        self, broker: int, batch: list[_Queued], answers: list[dict[TopicPartition, ErrorCode]]
    ) -> None:
        """Kafka's ``TransactionMarkerRequestCompletionHandler.onComplete``."""
        outcomes = _Outcomes()
        with self._lock:
            self.requests_sent += 1
            for queued, errors in zip(batch, answers, strict=True):
                self._handle_marker_locked(broker, queued, errors, outcomes)
        self._report(outcomes)

    def _handle_marker_locked(
        self,
        broker: int,
        queued: _Queued,
        errors: dict[TopicPartition, ErrorCode],
        outcomes: _Outcomes,
    ) -> None:
        pending = queued.pending
        txn_id = pending.transactional_id
        if self._pending.get(txn_id) is not pending:
            return  # cancelled or replaced while in flight
        retry: set[TopicPartition] = set()
        unauthorized: set[TopicPartition] = set()
        for tp, error in sorted(errors.items()):
            outcome = marker_outcome(error)
            if outcome is MarkerOutcome.WRITTEN:
                pending.remaining.discard(tp)
            elif outcome is MarkerOutcome.RETRY:
                logger.info(
                    "marker not written, retrying transactional_id=%s partition=%s error=%s",
                    txn_id,
                    tp,
                    error.name,
                )
                retry.add(tp)
            elif outcome is MarkerOutcome.UNAUTHORIZED:
                unauthorized.add(tp)
            else:
                level = logging.INFO if outcome is MarkerOutcome.FENCED else logging.ERROR
                logger.log(
                    level,
                    "markers of transaction stopped transactional_id=%s partition=%s error=%s"
                    " producer_epoch=%d coordinator_epoch=%d",
                    txn_id,
                    tp,
                    error.name,
                    queued.entry.producer_epoch,
                    queued.entry.coordinator_epoch,
                )
                self._abandon_locked(pending, error, outcomes)
                return
        if unauthorized:
            logger.error(
                "broker %d refused WriteTxnMarkers with CLUSTER_AUTHORIZATION_FAILED"
                " transactional_id=%s partitions=%s: grant this broker's principal"
                " ClusterAction on the cluster (kafka-acls --add --allow-principal <broker"
                " principal> --operation ClusterAction --cluster); retrying",
                broker,
                txn_id,
                sorted(str(tp) for tp in unauthorized),
            )
            if not pending.reported_unauthorized:
                pending.reported_unauthorized = True
                outcomes.failed.append((txn_id, ErrorCode.cluster_authorization_failed))
            self._delay_locked(
                _Queued(pending, queued.entry.with_partitions(unauthorized)),
                max(self._retry_backoff_s, UNAUTHORIZED_RETRY_BACKOFF_MS / 1000),
            )
        if retry:
            self._delay_locked(
                _Queued(pending, queued.entry.with_partitions(retry)), self._retry_backoff_s
            )
        self._maybe_complete_locked(pending, outcomes)
