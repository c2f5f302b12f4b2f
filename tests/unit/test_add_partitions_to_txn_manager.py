"""``AddPartitionsToTxnManager`` and the produce path's error translation (KIP-890 part 1):
where a transactional id's coordinator is, how its answers reach a producer, and how
verifications for one coordinator broker share its one request in flight (Kafka's
``AddPartitionsToTxnManagerTest`` and ``ReplicaManagerTest`` cases).

The coordinator of the batching test is a socket that takes requests and never answers
(a hung broker): the requests it receives are decoded with kio's own reader, and each
verification ends with NETWORK_EXCEPTION when the request times out.
"""

from __future__ import annotations

import asyncio
import datetime
import socket
import struct
import threading
from collections.abc import Iterator

import pytest
from kio.index import load_request_schema
from kio.schema.add_partitions_to_txn.v4.response import (
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnResult,
    AddPartitionsToTxnTopicResult,
)
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader
from kio.serial.readers import read_unsigned_varint

from storage_core.common import TopicPartition
from storage_core.errors import InvalidTxnStateError, NotEnoughReplicasError
from storage_core.replication.metadata_cache import (
    MetadataCache,
    MetadataImage,
    PartitionMetadata,
    TopicMetadata,
)
from storage_core.server.add_partitions_to_txn_manager import (
    AddPartitionsToTxnManager,
    response_answers,
    unverified,
)
from storage_core.server.handlers.common import error_code_of
from storage_core.server.produce_verification import produce_error
from storage_core.zk.zk_data import NO_LEADER, BrokerRegistration, EndPoint

E = ErrorCode
TP0, TP1, TP2 = (TopicPartition("orders", p) for p in range(3))
LISTENER = "INTERNAL"
TXN_STATE = "__transaction_state"


def image(*, leader: int = 2, port: int = 9, listener: str = LISTENER) -> MetadataImage:
    return MetadataImage(
        brokers={
            2: BrokerRegistration(
                broker_id=2, endpoints=(EndPoint(listener=listener, host="127.0.0.1", port=port),)
            )
        },
        topics={
            TXN_STATE: TopicMetadata(
                name=TXN_STATE,
                topic_id=None,
                partitions=(
                    PartitionMetadata(
                        partition=0, replicas=(2,), leader=leader, leader_epoch=0, isr=(2,)
                    ),
                ),
            )
        },
    )


def manager(cache: MetadataCache, *, request_timeout_ms: int = 30_000) -> AddPartitionsToTxnManager:
    return AddPartitionsToTxnManager(
        broker_id=1,
        metadata_cache=cache,
        inter_broker_listener_name=LISTENER,
        local_coordinator=lambda: None,
        request_timeout_ms=request_timeout_ms,
    )


def cache_of(metadata: MetadataImage) -> MetadataCache:
    cache = MetadataCache(1)
    cache.set_image(metadata)
    return cache


# ------------------------------------------------------------------------ translation
def test_a_coordinators_answers_as_a_producer_expects_them() -> None:
    answers = {
        TP0: E.none,
        TP1: E.producer_fenced,
        TP2: E.transaction_abortable,
    }
    assert unverified(answers, generic_errors=False) == {
        TP1: E.invalid_producer_epoch,
        TP2: E.invalid_txn_state,
    }
    assert unverified(answers, generic_errors=True) == {
        TP1: E.invalid_producer_epoch,
        TP2: E.transaction_abortable,  # Produce v11+
    }


@pytest.mark.parametrize(
    "error",
    [
        E.concurrent_transactions,
        E.network_exception,
        E.coordinator_load_in_progress,
        E.coordinator_not_available,
        E.not_coordinator,
    ],
)
def test_a_verification_that_could_not_complete_is_retriable(error: ErrorCode) -> None:
    refused = produce_error(error)
    assert isinstance(refused, NotEnoughReplicasError)
    assert str(refused) == (
        "Unable to verify the partition has been added to the transaction. Underlying"
        f" error: {error.name.upper()}"
    )


def test_other_answers_keep_their_error() -> None:
    not_added = produce_error(E.invalid_txn_state)
    assert isinstance(not_added, InvalidTxnStateError)
    assert str(not_added) == "Partition was not added to the transaction"
    for error in (E.invalid_producer_epoch, E.transaction_abortable, E.invalid_producer_id_mapping):
        assert error_code_of(produce_error(error)) == error


def _response(
    error: ErrorCode, results: tuple[AddPartitionsToTxnResult, ...] = ()
) -> AddPartitionsToTxnResponse:
    return AddPartitionsToTxnResponse(
        throttle_time=datetime.timedelta(0), error_code=error, results_by_transaction=results
    )


def test_request_level_errors_and_partitions_left_out() -> None:
    class Asked:
        def __init__(self, transactional_id: str, *partitions: TopicPartition) -> None:
            self.transactional_id = transactional_id
            self.partitions = partitions

    batch = [Asked("a", TP0, TP1), Asked("b", TP2)]
    denied = response_answers(2, batch, _response(E.cluster_authorization_failed))  # type: ignore[arg-type]
    assert denied == {
        "a": {TP0: E.invalid_txn_state, TP1: E.invalid_txn_state},
        "b": {TP2: E.invalid_txn_state},
    }
    answered = _response(
        E.none,
        (
            AddPartitionsToTxnResult(
                transactional_id="a",
                topic_results=(
                    AddPartitionsToTxnTopicResult(
                        name="orders",
                        results_by_partition=(
                            AddPartitionsToTxnPartitionResult(
                                partition_index=0, partition_error_code=E.none
                            ),
                        ),
                    ),
                ),
            ),
        ),
    )
    assert response_answers(2, batch, answered) == {  # type: ignore[arg-type]
        "a": {TP0: E.none, TP1: E.network_exception},
        "b": {TP2: E.network_exception},
    }


# ------------------------------------------------------------------------ the coordinator
def test_the_coordinator_is_the_live_leader_of_the_ids_partition() -> None:
    assert manager(cache_of(image())).coordinator_of("any") == 2
    assert manager(cache_of(MetadataImage())).coordinator_of("any") is None  # no topic
    assert manager(cache_of(image(leader=NO_LEADER))).coordinator_of("any") is None
    assert manager(cache_of(image(leader=3))).coordinator_of("any") is None  # not alive
    assert manager(cache_of(image(listener="PLAINTEXT"))).coordinator_of("any") is None


def test_no_coordinator_answers_coordinator_not_available() -> None:
    async def ask() -> dict[TopicPartition, ErrorCode]:
        return await manager(cache_of(MetadataImage())).verify_transaction("t", 1, 0, [TP0])

    assert asyncio.run(ask()) == {TP0: E.coordinator_not_available}


# ------------------------------------------------------------------------ one request in flight
class SilentBroker:
    """Accepts connections and reads request frames; never answers."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.frames: list[bytes] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        with conn:
            while True:
                header = conn.recv(4, socket.MSG_WAITALL)
                if len(header) < 4:
                    return
                (size,) = struct.unpack(">i", header)
                self.frames.append(conn.recv(size, socket.MSG_WAITALL))

    def requests(self) -> list[dict[str, tuple[int, bool, list[int]]]]:
        """Each AddPartitionsToTxn v4 received: transactional id -> (epoch, verify_only,
        partitions of "orders")."""
        decoded = []
        schema = load_request_schema(24, 4)
        for frame in self.frames:
            api_key, version = struct.unpack_from(">hh", frame, 0)
            assert (api_key, version) == (24, 4)
            offset = 8  # api key, version, correlation id
            (client_id_size,) = struct.unpack_from(">h", frame, offset)
            offset += 2 + client_id_size
            _tags, used = read_unsigned_varint(frame, offset)
            body, _ = entity_reader(schema)(frame, offset + used)
            decoded.append(
                {
                    str(t.transactional_id): (
                        int(t.producer_epoch),
                        bool(t.verify_only),
                        [int(p) for topic in t.topics for p in topic.partitions],
                    )
                    for t in body.transactions
                }
            )
        return decoded

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def silent() -> Iterator[SilentBroker]:
    broker = SilentBroker()
    yield broker
    broker.close()


def test_waiting_verifications_share_the_next_request_and_the_newest_epoch_wins(
    silent: SilentBroker,
) -> None:
    verifier = manager(cache_of(image(port=silent.port)), request_timeout_ms=1000)

    async def scenario() -> list[dict[TopicPartition, ErrorCode]]:
        first = asyncio.ensure_future(verifier.verify_transaction("a", 10, 0, [TP0]))
        await asyncio.sleep(0.2)  # "a" is in flight: the others wait for the next request
        older = asyncio.ensure_future(verifier.verify_transaction("x", 11, 1, [TP1]))
        newer = asyncio.ensure_future(verifier.verify_transaction("x", 11, 2, [TP1]))
        retried = asyncio.ensure_future(verifier.verify_transaction("x", 11, 2, [TP1, TP2]))
        fenced = asyncio.ensure_future(verifier.verify_transaction("x", 11, 1, [TP1]))
        other = asyncio.ensure_future(verifier.verify_transaction("y", 12, 0, [TP2]))
        return list(await asyncio.gather(first, older, newer, retried, fenced, other))

    try:
        first, older, newer, retried, fenced, other = asyncio.run(scenario())
    finally:
        verifier.shutdown()
    assert older == {TP1: E.invalid_producer_epoch}  # replaced by a newer epoch
    assert newer == {TP1: E.network_exception}  # replaced by the same epoch: a retry
    assert fenced == {TP1: E.invalid_producer_epoch}  # older than the one waiting: not sent
    # the request of "a", then one with both waiting transactions, each timed out
    assert first == {TP0: E.network_exception}
    assert retried == {TP1: E.network_exception, TP2: E.network_exception}
    assert other == {TP2: E.network_exception}
    assert verifier.requests_sent == 2
    assert silent.requests() == [
        {"a": (0, True, [0])},
        {"x": (2, True, [1, 2]), "y": (0, True, [2])},
    ]
