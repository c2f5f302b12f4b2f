"""A transaction decided but not finished: the partition leader and then the transaction
coordinator are SIGKILLed between the PrepareCommit and its markers. The coordinator that
takes over ``__transaction_state`` loads the PrepareCommit, writes the markers once the
partition is back, then the CompleteCommit: read_committed consumers see the transaction once,
all of it."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

from embedded.zookeeper import ZooKeeperEnsemble
from tests import cluster_support
from tests.cluster_support import eventually
from tests.integration.raw_wire import call, connect
from tests.integration.test_transaction_markers import consume
from tests.integration.txn_wire import DescribedTransaction, describe_transactions

cluster_support.require_java()
pytestmark = pytest.mark.timeout(300)

TOPIC = "orders"
TXN_ID = "order-writer"
TXN_PARTITIONS = 5
RECORDS = 10


def find_coordinator(port: int, transactional_id: str) -> int:
    with connect(port) as sock:
        answer = call(sock, 10, 3, key=transactional_id, key_type=1)
    return int(answer.node_id) if answer.error_code == 0 else -1


def describe(port: int) -> DescribedTransaction:
    with connect(port) as sock:
        (described,) = describe_transactions(sock, (TXN_ID,))
    return described


def test_coordinator_and_leader_killed_between_prepare_commit_and_markers(
    zookeeper: ZooKeeperEnsemble, tmp_path: Path
) -> None:
    overrides = {"transaction.state.log.num.partitions": str(TXN_PARTITIONS)}
    with cluster_support.three_brokers(zookeeper, tmp_path, overrides) as (brokers, _):
        client = cluster_support.admin(brokers)
        eventually(lambda: len(client.describe_cluster().result(10).nodes) == 3, what="3 brokers")
        first = next(iter(brokers.values()))
        coordinator = eventually(
            lambda: (c := find_coordinator(first.port, TXN_ID)) > 0 and c,
            what="the transaction coordinator",
        )
        leader = min(b for b in brokers if b != coordinator)
        survivor = next(b for b in brokers if b not in (coordinator, leader))
        # one replica: while its broker is down no marker can be written anywhere
        client.create_topics([NewTopic(TOPIC, num_partitions=1, replica_assignment=[[leader]])])[
            TOPIC
        ].result(30)
        eventually(
            lambda: (
                cluster_support.partition_leaders(first.bootstrap, TOPIC).get(0, (-1,))[0] == leader
            ),
            what="the topic's leader",
        )

        producer = Producer(
            {"bootstrap.servers": brokers[leader].bootstrap, "transactional.id": TXN_ID}
        )
        producer.init_transactions(60)
        producer.begin_transaction()
        for i in range(RECORDS):
            producer.produce(TOPIC, value=f"order-{i}")
        producer.flush(30)  # on the leader's disk, not decided yet

        brokers[leader].kill()
        committed = threading.Event()
        threading.Thread(
            target=lambda: (producer.commit_transaction(120), committed.set()), daemon=True
        ).start()
        # PrepareCommit is written once the dead leader leaves __transaction_state's ISR
        assert committed.wait(90), "EndTxn was not answered"
        brokers[coordinator].kill()

        survivor_port = brokers[survivor].port
        loaded = eventually(
            lambda: (d := describe(survivor_port)).error_code == 0 and d,
            what="the surviving broker coordinating the transactional id",
            timeout_s=90,
        )
        assert loaded.state == "PrepareCommit", loaded  # decided, markers not written
        assert loaded.topics == {TOPIC: [0]}

        brokers[leader].start()  # the partition is back: the markers can be written
        done = eventually(
            lambda: (d := describe(survivor_port)).state == "CompleteCommit" and d,
            what="CompleteCommit on the new coordinator",
            timeout_s=90,
        )
        assert done.producer_id == loaded.producer_id
        values = consume(brokers[leader].bootstrap, TOPIC, "read_committed", RECORDS + 1)
        assert sorted(values) == sorted(f"order-{i}".encode() for i in range(RECORDS))

        brokers[coordinator].start()
        again = consume(brokers[coordinator].bootstrap, TOPIC, "read_committed", RECORDS + 1)
        assert sorted(again) == sorted(values)
