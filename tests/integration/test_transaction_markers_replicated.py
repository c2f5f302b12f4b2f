"""Followers rebuild the leader's transaction state: after the leader of a partition with
committed, aborted and open transactions is SIGKILLed, the new leader (a former follower)
answers the same LSO and aborted transactions, knows the open transaction, and ends it.

The transactions are written with ``Wire`` (no coordinator): the brokers do not verify
transactions (``NO_VERIFICATION``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka.admin import NewTopic
from kio.schema.errors import ErrorCode

from embedded.zookeeper import ZooKeeperEnsemble
from tests import cluster_support
from tests.cluster_support import eventually
from tests.integration.test_transaction_markers import (
    COORDINATOR_EPOCH,
    NO_VERIFICATION,
    Wire,
    consume,
)

cluster_support.require_java()
pytestmark = pytest.mark.timeout(240)

TOPIC = "txn-replicated"


def test_a_new_leader_has_the_same_transactions(
    zookeeper: ZooKeeperEnsemble, tmp_path: Path
) -> None:
    with cluster_support.three_brokers(zookeeper, tmp_path, NO_VERIFICATION) as (brokers, _):
        client = cluster_support.admin(brokers)
        eventually(lambda: len(client.describe_cluster().result(10).nodes) == 3, what="3 brokers")
        client.create_topics([NewTopic(TOPIC, 1, 3, config={"min.insync.replicas": "2"})])[
            TOPIC
        ].result(30)
        any_broker = next(iter(brokers.values())).bootstrap
        leader = eventually(
            lambda: (
                cluster_support.partition_leaders(any_broker, TOPIC).get(0, (-1, -1))[0] > 0
                and cluster_support.partition_leaders(any_broker, TOPIC)[0][0]
            ),
            what="a leader",
        )
        wire = Wire(brokers[leader].port, TOPIC)
        committed, aborted, open_ = wire.producer_id(), wire.producer_id(), wire.producer_id()
        wire.produce(committed, b"a1", b"a2", transactional=True)  # 0-1
        wire.produce(aborted, b"b1", transactional=True)  # 2
        assert wire.end(committed, commit=True) == ErrorCode.none  # 3
        assert wire.end(aborted, commit=False) == ErrorCode.none  # 4
        wire.produce(open_, b"c1", transactional=True)  # 5 (acks=-1: every ISR member has it)
        assert (wire.latest(0), wire.latest(1)) == (6, 5)
        wire.close()

        brokers[leader].kill()
        survivors = {b: p for b, p in brokers.items() if b != leader}
        bootstrap = next(iter(survivors.values())).bootstrap
        new_leader = eventually(
            lambda: (
                (
                    (now := cluster_support.partition_leaders(bootstrap, TOPIC).get(0, (-1, -1))[0])
                    in survivors
                )
                and now
            ),
            what="a new leader among the survivors",
        )
        wire = Wire(survivors[new_leader].port, TOPIC)
        answer = eventually(
            lambda: (a := wire.fetch(1)).high_watermark == 6 and a,  # type: ignore[attr-defined]
            what="the new leader's high watermark at 6",
        )
        assert answer.last_stable_offset == 5
        assert [(a.producer_id, a.first_offset) for a in answer.aborted_transactions] == [
            (aborted[0], 2)
        ]
        error, producers = wire.producers()
        assert error == ErrorCode.none
        assert producers[open_[0]][3] == 5  # its transaction open since offset 5
        assert producers[aborted[0]][2] == COORDINATOR_EPOCH
        assert wire.end(open_, commit=True) == ErrorCode.none
        assert wire.latest(1) == 7
        wire.close()
        assert consume(survivors[new_leader].bootstrap, TOPIC, "read_committed", 7) == [
            b"a1",
            b"a2",
            b"c1",
        ]
