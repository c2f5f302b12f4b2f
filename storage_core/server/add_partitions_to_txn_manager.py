"""``AddPartitionsToTxnManager``: asks the transaction coordinator of a transactional id whether
partitions were added to its transaction, for a leader that sees a transactional produce
for a partition where the producer has no transaction ongoing (KIP-890 part 1; Kafka's
class of that name, with its ``AddPartitionsToTxnHandler.onComplete``).

The coordinator of a transactional id is the leader of its ``__transaction_state`` partition
(``partition_for`` over the topic's partition count in the metadata image). No such topic, no
leader, or a leader that is not alive or has no endpoint of the inter-broker listener:
COORDINATOR_NOT_AVAILABLE.

A coordinator on another broker is asked with AddPartitionsToTxn v4 ``verify_only`` over the
inter-broker listener with the broker's own client security (as the transaction marker
channel connects). One request is in flight per coordinator broker at a time; the
verifications that arrive meanwhile wait and go together in the next request (at most
``TRANSACTIONS_PER_REQUEST_MAX``). A transactional id already waiting is replaced, as in
Kafka: a newer epoch answers the older verification INVALID_PRODUCER_EPOCH, the same epoch
NETWORK_EXCEPTION (the client is retrying); an older epoch is answered
INVALID_PRODUCER_EPOCH at once.

When this broker is the coordinator, its ``TransactionCoordinator.verify_partitions``
answers without a request (Kafka always sends one, to itself too). The answer is the one
the v4 handler would give, as it calls the same method, after the CLUSTER_ACTION check that
the broker's own principal passes; the request would only add a connection to itself, a
thread hop and a round trip to every first produce of a transaction to a partition, which on
a single broker is every verification.

Answers, as Kafka maps them for a producer: a failed or timed-out request (or one that
could not connect) is NETWORK_EXCEPTION for all its partitions; a request-level error is
that error for all of them, CLUSTER_AUTHORIZATION_FAILED becoming INVALID_TXN_STATE (the
client must not see it); per partition, PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH and
TRANSACTION_ABORTABLE becomes INVALID_TXN_STATE for producers older than Produce v11.

Thread-safety: ``verify_transaction`` runs on the broker's event loop, which alone touches
the queues and the in-flight set. Each request runs on one of the manager's threads with
the connection to its destination, which no other request uses meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Collection, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

from kio.schema.add_partitions_to_txn.v4 import request as v4
from kio.schema.add_partitions_to_txn.v4.response import AddPartitionsToTxnResponse
from kio.schema.errors import ErrorCode
from kio.schema.types import ProducerId, TopicName, TransactionalId
from kio.static.primitive import i16, i32

from storage_core.client.connection import ConnectionConfig, KafkaConnection
from storage_core.client.errors import ClientError
from storage_core.common import TopicPartition
from storage_core.coordinator.transaction.transaction_log import (
    TRANSACTION_STATE_TOPIC_NAME,
    partition_for,
)
from storage_core.replication.metadata_cache import MetadataCache
from storage_core.security.client_transport import PLAINTEXT_CLIENT, ClientSecurityConfig
from storage_core.server.kafka_config import KafkaConfig
from storage_core.server.listeners import inter_broker_client_security
from storage_core.zk.zk_data import NO_LEADER

logger = logging.getLogger(__name__)

E = ErrorCode

TRANSACTIONS_PER_REQUEST_MAX = 1000
SENDER_THREADS_MAX = 8
DEFAULT_REQUEST_TIMEOUT_MS = 30_000
_CONNECT_TIMEOUT_MS = 10_000

Answers = dict[TopicPartition, ErrorCode]


class LocalTransactionCoordinator(Protocol):
    """What the manager asks of this broker's own coordinator."""

    def verify_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Collection[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]: ...


@dataclass(eq=False, slots=True, kw_only=True)
class _Verification:
    """One produce's question, waiting for its answer (on the event loop)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: tuple[TopicPartition, ...]
    future: asyncio.Future[Answers]

    def answer(self, answers: Answers) -> None:
        if not self.future.done():
            self.future.set_result(answers)

    def answer_all(self, error: ErrorCode) -> None:
        self.answer(dict.fromkeys(self.partitions, error))


def unverified(answers: Mapping[TopicPartition, ErrorCode], *, generic_errors: bool) -> Answers:
    """The partitions the coordinator did not confirm, with the error a producer expects
    (Kafka's ``onComplete``): PRODUCER_FENCED is INVALID_PRODUCER_EPOCH, and
    TRANSACTION_ABORTABLE is INVALID_TXN_STATE unless the produce's version knows it
    (``generic_errors``: Produce v11 and later)."""
    errors: Answers = {}
    for tp, answer in answers.items():
        if answer == E.none:
            continue
        error = answer
        if answer == E.producer_fenced:
            error = E.invalid_producer_epoch
        elif answer == E.transaction_abortable and not generic_errors:
            error = E.invalid_txn_state
        errors[tp] = error
    return errors


class AddPartitionsToTxnManager:
    """Verifies that partitions are in a transaction (see the module docstring)."""

    def __init__(
        self,
        *,
        broker_id: int,
        metadata_cache: MetadataCache,
        inter_broker_listener_name: str,
        local_coordinator: Callable[[], LocalTransactionCoordinator | None],
        security: ClientSecurityConfig = PLAINTEXT_CLIENT,
        request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS,
    ) -> None:
        if request_timeout_ms <= 0:
            raise ValueError(f"request_timeout_ms must be positive, got {request_timeout_ms}")
        self.broker_id = broker_id
        self._metadata_cache = metadata_cache
        self._listener_name = inter_broker_listener_name
        self._local_coordinator = local_coordinator
        self._connection_config = ConnectionConfig(
            client_id=f"broker-{broker_id}-add-partitions-to-txn",
            connect_timeout_ms=min(_CONNECT_TIMEOUT_MS, request_timeout_ms),
            request_timeout_ms=request_timeout_ms,
            security=security,
        )
        self._queued: dict[int, dict[str, _Verification]] = {}
        self._in_flight: set[int] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._connections: dict[int, KafkaConnection] = {}
        self._io = ThreadPoolExecutor(
            max_workers=SENDER_THREADS_MAX,
            thread_name_prefix=f"AddPartitionsToTxnSender-{broker_id}",
        )
        self._closed = False
        self.requests_sent = 0
        """AddPartitionsToTxn requests sent (answered or failed), for tests."""

    # ------------------------------------------------------------------ verification
    async def verify_transaction(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        *,
        generic_errors: bool = False,
    ) -> Answers:
        """The partitions that are not verified, with their errors (empty: all are in the
        transaction). Never raises for a coordinator's failure: that is the answer."""
        requested = tuple(partitions)
        coordinator = self.coordinator_of(transactional_id)
        if coordinator is None or self._closed:
            return dict.fromkeys(requested, E.coordinator_not_available)
        if coordinator == self.broker_id:
            local = self._local_coordinator()
            if local is None:
                return dict.fromkeys(requested, E.coordinator_not_available)
            answers = local.verify_partitions(
                transactional_id, producer_id, producer_epoch, requested
            )
            return unverified(answers, generic_errors=generic_errors)
        verification = _Verification(
            transactional_id=transactional_id,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            partitions=requested,
            future=asyncio.get_running_loop().create_future(),
        )
        self._enqueue(coordinator, verification)
        answers = await verification.future
        return unverified(answers, generic_errors=generic_errors)

    def coordinator_of(self, transactional_id: str) -> int | None:
        """The broker leading ``transactional_id``'s ``__transaction_state`` partition, if
        it is alive with an inter-broker endpoint (Kafka's ``getTransactionCoordinator``)."""
        image = self._metadata_cache.image()
        topic = image.topic(TRANSACTION_STATE_TOPIC_NAME)
        if topic is None or not topic.partitions:
            return None
        partition = topic.partition(partition_for(transactional_id, len(topic.partitions)))
        if partition is None or partition.leader == NO_LEADER:
            return None
        registration = image.brokers.get(partition.leader)
        if registration is None or registration.endpoint(self._listener_name) is None:
            return None
        return partition.leader

    def _enqueue(self, broker: int, verification: _Verification) -> None:
        queued = self._queued.setdefault(broker, {})
        existing = queued.get(verification.transactional_id)
        if existing is not None:
            if existing.producer_epoch > verification.producer_epoch:
                verification.answer_all(E.invalid_producer_epoch)  # fenced: not sent
                return
            existing.answer_all(
                E.invalid_producer_epoch
                if existing.producer_epoch < verification.producer_epoch
                else E.network_exception
            )
        queued[verification.transactional_id] = verification
        self._maybe_send(broker)

    def _maybe_send(self, broker: int) -> None:
        queued = self._queued.get(broker)
        if broker in self._in_flight or not queued:
            return
        batch = []
        for transactional_id in list(queued)[:TRANSACTIONS_PER_REQUEST_MAX]:
            batch.append(queued.pop(transactional_id))
        if not queued:
            del self._queued[broker]
        self._in_flight.add(broker)
        task = asyncio.ensure_future(self._send(broker, batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, broker: int, batch: list[_Verification]) -> None:
        try:
            loop = asyncio.get_running_loop()
            answers = await loop.run_in_executor(self._io, self._request, broker, batch)
        except Exception:  # the executor is shut down, or a bug: answer, never hang a produce
            logger.exception("AddPartitionsToTxn request failed broker=%d", broker)
            answers = {}
        finally:
            self._in_flight.discard(broker)
        for verification in batch:
            result = answers.get(verification.transactional_id)
            if result is None:
                verification.answer_all(E.network_exception)
            else:
                verification.answer(result)
        if not self._closed:
            self._maybe_send(broker)

    # ------------------------------------------------------------------ the request (a thread)
    def _request(self, broker: int, batch: list[_Verification]) -> dict[str, Answers]:
        """Send one AddPartitionsToTxn v4 for ``batch`` to ``broker``; each transaction's
        answers (blocking: the manager's threads)."""
        self.requests_sent += 1
        try:
            connection = self._connect(broker)
            response = connection.send(verify_only_request(batch), AddPartitionsToTxnResponse)
        except (ClientError, OSError) as error:
            self._disconnect(broker)
            logger.warning(
                "AddPartitionsToTxn failed with a network exception broker=%d error=%s",
                broker,
                error,
            )
            return {
                v.transactional_id: dict.fromkeys(v.partitions, E.network_exception) for v in batch
            }
        return response_answers(broker, batch, response)

    def _connect(self, broker: int) -> KafkaConnection:
        registration = self._metadata_cache.image().brokers.get(broker)
        endpoint = None if registration is None else registration.endpoint(self._listener_name)
        if endpoint is None:
            raise ConnectionError(
                f"broker {broker} has no endpoint of listener {self._listener_name}"
            )
        connection = self._connections.get(broker)
        if connection is not None and not connection.closed:
            if (connection.host, connection.port) == (endpoint.host, endpoint.port):
                return connection
            connection.close()
        connection = KafkaConnection.connect(endpoint.host, endpoint.port, self._connection_config)
        self._connections[broker] = connection
        return connection

    def _disconnect(self, broker: int) -> None:
        connection = self._connections.pop(broker, None)
        if connection is not None:
            connection.close()

    # ------------------------------------------------------------------ lifecycle
    def shutdown(self) -> None:
        """Answer what waits COORDINATOR_NOT_AVAILABLE, close the connections and stop the
        threads (call off the event loop; a request in flight fails with its connection)."""
        self._closed = True
        for queued in list(self._queued.values()):
            for verification in queued.values():
                loop = verification.future.get_loop()
                with contextlib.suppress(RuntimeError):  # its loop is closed already
                    loop.call_soon_threadsafe(verification.answer_all, E.coordinator_not_available)
        self._queued.clear()
        for broker in list(self._connections):
            self._disconnect(broker)
        self._io.shutdown(wait=True, cancel_futures=True)


def add_partitions_to_txn_manager_for(
    config: KafkaConfig,
    metadata_cache: MetadataCache,
    local_coordinator: Callable[[], LocalTransactionCoordinator | None],
) -> AddPartitionsToTxnManager | None:
    """A broker's manager: over its inter-broker listener with its client security; None
    with ``transaction.partition.verification.enable=false`` (nothing is verified)."""
    if not config.get_bool("transaction.partition.verification.enable"):
        return None
    listener_name, _ = config.inter_broker_listener()
    return AddPartitionsToTxnManager(
        broker_id=config.broker_id,
        metadata_cache=metadata_cache,
        inter_broker_listener_name=listener_name,
        local_coordinator=local_coordinator,
        security=inter_broker_client_security(config.props),
        request_timeout_ms=config.get_int("request.timeout.ms"),
    )


def verify_only_request(batch: Iterable[_Verification]) -> v4.AddPartitionsToTxnRequest:
    """AddPartitionsToTxn v4 with every transaction ``verify_only``."""
    transactions = []
    for verification in batch:
        topics: dict[str, list[int]] = {}
        for tp in verification.partitions:
            topics.setdefault(tp.topic, []).append(tp.partition)
        transactions.append(
            v4.AddPartitionsToTxnTransaction(
                transactional_id=TransactionalId(verification.transactional_id),
                producer_id=ProducerId(verification.producer_id),
                producer_epoch=i16(verification.producer_epoch),
                verify_only=True,
                topics=tuple(
                    v4.AddPartitionsToTxnTopic(
                        name=TopicName(topic), partitions=tuple(i32(p) for p in indexes)
                    )
                    for topic, indexes in topics.items()
                ),
            )
        )
    return v4.AddPartitionsToTxnRequest(transactions=tuple(transactions))


def response_answers(
    broker: int, batch: Iterable[_Verification], response: AddPartitionsToTxnResponse
) -> dict[str, Answers]:
    """Each transaction's answers. A request-level error is every partition's
    (CLUSTER_AUTHORIZATION_FAILED as INVALID_TXN_STATE); a partition or a transaction the
    coordinator left out of its answer is NETWORK_EXCEPTION (retried by the producer)."""
    if response.error_code != E.none:
        logger.error(
            "AddPartitionsToTxn answered with an error broker=%d error=%s",
            broker,
            response.error_code.name.upper(),
        )
        error = (
            E.invalid_txn_state
            if response.error_code == E.cluster_authorization_failed
            else response.error_code
        )
        return {v.transactional_id: dict.fromkeys(v.partitions, error) for v in batch}
    by_transaction = {
        str(result.transactional_id): {
            TopicPartition(str(topic.name), int(p.partition_index)): p.partition_error_code
            for topic in result.topic_results
            for p in topic.results_by_partition
        }
        for result in response.results_by_transaction
    }
    return {
        v.transactional_id: {
            tp: by_transaction.get(v.transactional_id, {}).get(tp, E.network_exception)
            for tp in v.partitions
        }
        for v in batch
    }
