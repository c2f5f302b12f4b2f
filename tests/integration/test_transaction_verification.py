"""Transaction verification on the produce path (KIP-890 part 1) on real broker processes:
a transactional produce for a partition that was never added to its transaction gets
Kafka's error and stores nothing; once added (AddPartitionsToTxn v3, as a client adds it)
the same produce is written. The leader asks the coordinator of the transactional id, on
this broker or on another one (AddPartitionsToTxn v4 verify_only over the inter-broker
listener); a coordinator it cannot reach makes the produce fail retriably
(NOT_ENOUGH_REPLICAS), still storing nothing.

Requests are sent over raw sockets, as a transactional producer sends them, so that each
answer is seen as it is (a client would retry or abort).
"""

from __future__ import annotations

import datetime
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import NewTopic
from kio.schema.errors import ErrorCode

from embedded.zookeeper import ZooKeeperEnsemble
from storage_core.protocol.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from storage_core.records import SimpleRecord, build_batch
from storage_core.security.authorizer.acl_authorizer import AclAuthorizer, AuthorizerConfig
from storage_core.zk.acl_znodes import AclZkStore
from storage_core.zk.local_znode_tree import LocalZNodeTree
from tests import cluster_support
from tests.broker_process import BrokerProcess
from tests.cluster_support import eventually
from tests.integration import raw_wire
from tests.integration.txn_wire import await_coordinator

pytestmark = pytest.mark.timeout(240)

E = ErrorCode
TOPIC = "verified"
RETRIED_WHILE_LOADING = frozenset(
    {E.coordinator_load_in_progress, E.coordinator_not_available, E.not_coordinator}
)


class TxnWire:
    """One connection to a broker, speaking as a transactional producer."""

    def __init__(self, port: int) -> None:
        self.sock: socket.socket = raw_wire.connect(port)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> TxnWire:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def init_producer_id(self, transactional_id: str | None) -> tuple[int, int]:
        """InitProducerId v4 (with a transactional id: once its coordinator has loaded)."""

        def ask() -> Any:
            body = raw_wire.call(
                self.sock,
                22,
                4,
                transactional_id=transactional_id,
                transaction_timeout=datetime.timedelta(seconds=60),
                producer_id=-1,
                producer_epoch=-1,
            )
            return None if body.error_code in RETRIED_WHILE_LOADING else body

        if transactional_id is not None:  # as a client starts: creates __transaction_state
            await_coordinator(self.sock, transactional_id)
        body = eventually(ask, what=f"InitProducerId for {transactional_id}")
        assert body.error_code == E.none, body
        return int(body.producer_id), int(body.producer_epoch)

    def add_partitions(
        self, transactional_id: str, producer: tuple[int, int], *partitions: int
    ) -> list[ErrorCode]:
        module = raw_wire.request_classes(24, 3)
        body = raw_wire.call(
            self.sock,
            24,
            3,
            v3_and_below_transactional_id=transactional_id,
            v3_and_below_producer_id=producer[0],
            v3_and_below_producer_epoch=producer[1],
            v3_and_below_topics=(
                module.AddPartitionsToTxnTopic(name=TOPIC, partitions=tuple(partitions)),
            ),
        )
        return [
            p.partition_error_code
            for t in body.results_by_topic_v3_and_below
            for p in t.results_by_partition
        ]

    def produce(
        self,
        producer: tuple[int, int],
        *,
        transactional_id: str | None,
        partition: int = 0,
        sequence: int = 0,
        version: int = 9,
    ) -> Any:
        """One transactional batch of one record; the partition's answer."""
        batch = build_batch(
            [SimpleRecord(value=b"v%d" % sequence)],
            producer_id=producer[0],
            producer_epoch=producer[1],
            base_sequence=sequence,
            is_transactional=True,
        )
        module = raw_wire.request_classes(0, version)
        body = raw_wire.call(
            self.sock,
            0,
            version,
            transactional_id=transactional_id,
            acks=-1,
            timeout=datetime.timedelta(seconds=10),
            topic_data=(
                module.TopicProduceData(
                    name=TOPIC,
                    partition_data=(module.PartitionProduceData(index=partition, records=batch),),
                ),
            ),
        )
        (answer,) = body.responses[0].partition_responses
        return answer

    def log_end_offset(self, partition: int = 0) -> int:
        module = raw_wire.request_classes(2, 7)
        body = raw_wire.call(
            self.sock,
            2,
            7,
            replica_id=-1,
            isolation_level=0,
            topics=(
                module.ListOffsetsTopic(
                    name=TOPIC,
                    partitions=(
                        module.ListOffsetsPartition(
                            partition_index=partition, current_leader_epoch=-1, timestamp=-1
                        ),
                    ),
                ),
            ),
        )
        (answer,) = body.topics[0].partitions
        assert answer.error_code == E.none, answer
        return int(answer.offset)


def single_broker(directory: Path, **overrides: str) -> BrokerProcess:
    return BrokerProcess(
        directory,
        overrides={
            "auto.create.topics.enable": "false",
            "transaction.state.log.num.partitions": "4",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            **overrides,
        },
    )


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with single_broker(tmp_path) as process:
        raw_wire.create_topic(process.port, TOPIC, partitions=2)
        yield process


# ------------------------------------------------------------------------ one broker
def test_a_partition_never_added_is_refused_and_nothing_is_stored(broker: BrokerProcess) -> None:
    with TxnWire(broker.port) as wire:
        producer = wire.init_producer_id("never-added")
        answer = wire.produce(producer, transactional_id="never-added")
        assert answer.error_code == E.invalid_txn_state, answer
        assert answer.error_message == "Partition was not added to the transaction"
        assert answer.base_offset == -1
        # Produce v11+ knows KIP-890's TRANSACTION_ABORTABLE and gets it as it is
        assert wire.produce(producer, transactional_id="never-added", version=11).error_code == (
            E.transaction_abortable
        )
        assert wire.log_end_offset() == 0
        # no transactional id: nothing to ask, the log refuses the transaction it would open
        refused = wire.produce(producer, transactional_id=None)
        assert refused.error_code == E.invalid_txn_state
        assert "not part of an ongoing transaction" in refused.error_message
        assert wire.log_end_offset() == 0


def test_after_add_partitions_the_same_produce_is_written(broker: BrokerProcess) -> None:
    with TxnWire(broker.port) as wire:
        producer = wire.init_producer_id("adds-first")
        assert wire.produce(producer, transactional_id="adds-first").error_code == (
            E.invalid_txn_state
        )
        assert wire.add_partitions("adds-first", producer, 0) == [E.none]
        first = wire.produce(producer, transactional_id="adds-first")
        assert (first.error_code, first.base_offset) == (E.none, 0)
        # the transaction is open here now: the next batch needs no verification
        assert wire.produce(producer, transactional_id="adds-first", sequence=1).base_offset == 1
        # partition 1 was not added: refused, partition 0 unaffected
        other = wire.produce(producer, transactional_id="adds-first", partition=1)
        assert other.error_code == E.invalid_txn_state
        assert (wire.log_end_offset(0), wire.log_end_offset(1)) == (2, 0)


def test_a_fenced_producer_is_refused_by_the_verification(broker: BrokerProcess) -> None:
    with TxnWire(broker.port) as wire:
        old = wire.init_producer_id("fenced")
        new = wire.init_producer_id("fenced")  # bumps the epoch
        assert new[1] > old[1]
        answer = wire.produce(old, transactional_id="fenced")
        assert answer.error_code == E.invalid_producer_epoch, answer
        assert wire.log_end_offset() == 0


def test_batches_of_two_producers_in_one_produce_are_refused(broker: BrokerProcess) -> None:
    """Kafka's ``handleProduceAppend``: a transactional produce carries one producer id."""
    with TxnWire(broker.port) as wire:
        first = wire.init_producer_id("two-producers")
        second = wire.init_producer_id(None)
        assert wire.add_partitions("two-producers", first, 0, 1) == [E.none, E.none]
        module = raw_wire.request_classes(0, 9)
        body = raw_wire.call(
            wire.sock,
            0,
            9,
            transactional_id="two-producers",
            acks=-1,
            timeout=datetime.timedelta(seconds=10),
            topic_data=(
                module.TopicProduceData(
                    name=TOPIC,
                    partition_data=tuple(
                        module.PartitionProduceData(
                            index=index,
                            records=build_batch(
                                [SimpleRecord(value=b"v")],
                                producer_id=producer[0],
                                producer_epoch=producer[1],
                                base_sequence=0,
                                is_transactional=True,
                            ),
                        )
                        for index, producer in enumerate((first, second))
                    ),
                ),
            ),
        )
        answers = [p.error_code for p in body.responses[0].partition_responses]
        assert answers == [E.invalid_producer_id_mapping] * 2
        assert (wire.log_end_offset(0), wire.log_end_offset(1)) == (0, 0)


def test_with_verification_off_a_partition_never_added_is_written(tmp_path: Path) -> None:
    """``transaction.partition.verification.enable=false``: Kafka's behaviour before 3.6."""
    with single_broker(tmp_path, **{"transaction.partition.verification.enable": "false"}) as b:
        raw_wire.create_topic(b.port, TOPIC)
        with TxnWire(b.port) as wire:
            producer = wire.init_producer_id("unverified")
            answer = wire.produce(producer, transactional_id="unverified")
            assert (answer.error_code, answer.base_offset) == (E.none, 0)


# ------------------------------------------------------------------------ three brokers
def test_the_coordinator_on_another_broker_is_asked_over_the_wire(
    zookeeper: ZooKeeperEnsemble, tmp_path: Path
) -> None:
    """The partition's leader and the transactional id's coordinator are different brokers:
    the leader asks with AddPartitionsToTxn v4. Then the coordinator's broker is SIGKILLed
    (its ``__transaction_state`` partition has no other replica): the leader cannot ask,
    and answers NOT_ENOUGH_REPLICAS with nothing stored."""
    cluster_support.require_java()
    overrides = {
        "auto.create.topics.enable": "false",
        "transaction.state.log.num.partitions": "3",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
    }
    with cluster_support.three_brokers(zookeeper, tmp_path, overrides) as (brokers, _):
        client = cluster_support.admin(brokers)
        eventually(lambda: len(client.describe_cluster().result(10).nodes) == 3, what="3 brokers")
        first = next(iter(brokers.values()))
        transactional_id = "remote-coordinator"
        coordinator = eventually(
            lambda: (c := find_coordinator(first.port, transactional_id)) > 0 and c,
            what="the transaction coordinator",
        )
        leader = min(b for b in brokers if b != coordinator)
        client.create_topics([NewTopic(TOPIC, num_partitions=1, replica_assignment=[[leader]])])[
            TOPIC
        ].result(30)
        eventually(
            lambda: (
                cluster_support.partition_leaders(first.bootstrap, TOPIC).get(0, (-1,))[0] == leader
            ),
            what=f"{TOPIC} led by {leader}",
        )
        with TxnWire(brokers[coordinator].port) as at_coordinator:
            producer = at_coordinator.init_producer_id(transactional_id)
            with TxnWire(brokers[leader].port) as at_leader:
                answer = at_leader.produce(producer, transactional_id=transactional_id)
                assert answer.error_code == E.invalid_txn_state, answer
                assert answer.error_message == "Partition was not added to the transaction"
                assert at_leader.log_end_offset() == 0
                assert at_coordinator.add_partitions(transactional_id, producer, 0) == [E.none]
                written = at_leader.produce(producer, transactional_id=transactional_id)
                assert (written.error_code, written.base_offset) == (E.none, 0)

        # a new transactional id of the same coordinator, whose broker then dies
        later = next(
            f"later-{i}"
            for i in range(1000)
            if find_coordinator(first.port, f"later-{i}") == coordinator
        )
        with TxnWire(brokers[coordinator].port) as at_coordinator:
            producer = at_coordinator.init_producer_id(later)
        brokers[coordinator].kill()
        with TxnWire(brokers[leader].port) as at_leader:
            answer = at_leader.produce(producer, transactional_id=later)
            assert answer.error_code == E.not_enough_replicas, answer
            assert answer.error_message.startswith(
                "Unable to verify the partition has been added to the transaction."
            )
            assert at_leader.log_end_offset() == 1


def find_coordinator(port: int, transactional_id: str) -> int:
    with raw_wire.connect(port) as sock:
        answer = raw_wire.call(sock, 10, 3, key=transactional_id, key_type=1)
    return int(answer.node_id) if answer.error_code == E.none else -1


# ------------------------------------------------------------------------ the v4 question
ANYONE_HOST, BROKER_HOST = "127.0.0.1", "127.0.0.3"


def _grant(log_dir: Path) -> None:
    """ALL for ``User:ANONYMOUS`` from ``ANYONE_HOST``; from ``BROKER_HOST`` only
    ClusterAction on the cluster, as a broker's principal may be granted."""
    log_dir.mkdir(parents=True, exist_ok=True)
    session = LocalZNodeTree(log_dir).session()
    session.start()
    authorizer = AclAuthorizer(
        AclZkStore(session),
        AuthorizerConfig(super_users=frozenset(), allow_everyone_if_no_acl_found=False),
    )
    authorizer.start()

    def binding(kind: ResourceType, name: str, host: str, operation: AclOperation) -> AclBinding:
        return AclBinding(
            pattern=ResourcePattern(
                resource_type=kind, name=name, pattern_type=PatternType.LITERAL
            ),
            entry=AccessControlEntry(
                principal="User:ANONYMOUS",
                host=host,
                operation=operation,
                permission_type=AclPermissionType.ALLOW,
            ),
        )

    every = [
        (ResourceType.CLUSTER, "kafka-cluster"),
        (ResourceType.TOPIC, "*"),
        (ResourceType.TRANSACTIONAL_ID, "*"),
    ]
    results = authorizer.create_acls(
        [binding(kind, name, ANYONE_HOST, AclOperation.ALL) for kind, name in every]
        + [binding(ResourceType.CLUSTER, "kafka-cluster", BROKER_HOST, AclOperation.CLUSTER_ACTION)]
    )
    assert all(r.error is None for r in results)
    authorizer.close()
    session.stop()


def test_a_broker_with_cluster_action_alone_may_verify(tmp_path: Path) -> None:
    """AddPartitionsToTxn v4 is the leader's question on behalf of its clients: CLUSTER_ACTION
    is all it needs (Kafka checks WRITE on the transactional id and topics for v0-3 only)."""
    process = single_broker(
        tmp_path, **{"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"}
    )
    _grant(process.log_dir)
    with process:
        raw_wire.create_topic(process.port, TOPIC, partitions=2)
        with TxnWire(process.port) as wire:
            producer = wire.init_producer_id("asked-by-a-broker")
            assert wire.add_partitions("asked-by-a-broker", producer, 0) == [E.none]
        module = raw_wire.request_classes(24, 4)
        with socket.create_connection(
            ("127.0.0.1", process.port), timeout=10, source_address=(BROKER_HOST, 0)
        ) as sock:
            body = raw_wire.call(
                sock,
                24,
                4,
                transactions=(
                    module.AddPartitionsToTxnTransaction(
                        transactional_id="asked-by-a-broker",
                        producer_id=producer[0],
                        producer_epoch=producer[1],
                        verify_only=True,
                        topics=(module.AddPartitionsToTxnTopic(name=TOPIC, partitions=(0, 1)),),
                    ),
                ),
            )
        assert body.error_code == E.none
        (result,) = body.results_by_transaction
        assert {
            int(p.partition_index): p.partition_error_code
            for t in result.topic_results
            for p in t.results_by_partition
        } == {0: E.none, 1: E.transaction_abortable}
