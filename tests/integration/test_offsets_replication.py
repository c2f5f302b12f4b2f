"""Offset commits are answered only once ``__consumer_offsets`` has committed them.

Two brokers on a real ZooKeeper; the offsets topic has one partition on both
(``offsets.topic.replication.factor`` 2) and ``min.insync.replicas`` is 2. While both
replicas are in sync a commit succeeds. SIGSTOP the follower: once the coordinator (the
partition's leader) drops it from the ISR, every acks=-1 append to ``__consumer_offsets`` is
refused with NOT_ENOUGH_REPLICAS, which kafka-python's consumer must see as
COORDINATOR_NOT_AVAILABLE (Kafka's mapping), and OffsetFetch still shows the earlier commit.
SIGCONT it: it catches up, rejoins the ISR, and the same commit succeeds. Finally SIGKILL the
coordinator: the follower, elected leader, loads the group with the last commit (it was
replicated before it was answered).

(A single broker cannot show the refusal: Kafka caps the effective minimum ISR at the
replication factor, so ``min.insync.replicas`` 2 on a one-replica partition allows acks=-1.)
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition
from kafka.errors import CoordinatorNotAvailableError
from kafka.structs import OffsetAndMetadata

from embedded.zookeeper import ZooKeeperEnsemble
from tests import cluster_support
from tests.broker_process import BrokerProcess
from tests.cluster_support import SESSION_TIMEOUT_MS, eventually, partition_states
from tests.integration.test_consumer_groups import committed_offsets, create_topic
from tests.process_pause import pause

cluster_support.require_java()

pytestmark = pytest.mark.timeout(240)

TOPIC = "orders"
GROUP = "billing"
OFFSETS_TOPIC = "__consumer_offsets"
DEADLINE_S = 30
LAG_TIME_MAX_MS = 2000


@pytest.fixture
def brokers(zookeeper: ZooKeeperEnsemble, tmp_path: Path) -> Iterator[dict[int, BrokerProcess]]:
    overrides = {
        "offsets.topic.replication.factor": "2",
        "offsets.topic.num.partitions": "1",
        "min.insync.replicas": "2",
        "replica.lag.time.max.ms": str(LAG_TIME_MAX_MS),
    }
    with cluster_support.brokers_in_cluster(zookeeper, tmp_path, (1, 2), overrides) as (
        started,
        _connect,
    ):
        yield started


def commit_outcome(consumer: KafkaConsumer, offset: int) -> object:
    """What kafka-python reports for one commit: the error, or the committed offsets.

    ``commit_async`` does not retry, so the broker's answer reaches the callback as it is.
    """
    outcomes: list[object] = []
    consumer.commit_async(
        {KTopicPartition(TOPIC, 0): OffsetAndMetadata(offset, "", -1)},
        callback=lambda _offsets, outcome: outcomes.append(outcome),
    )
    deadline = time.monotonic() + DEADLINE_S
    while not outcomes and time.monotonic() < deadline:
        consumer.poll(timeout_ms=100)  # runs the commit callbacks
    assert outcomes, "the commit was not answered"
    return outcomes[0]


def commit_until_answered_ok(consumer: KafkaConsumer, offset: int) -> None:
    """Commit until one succeeds: a commit may meet the coordinator while it is still loading
    or the ISR is still refilling, and kafka-python does not retry asynchronous commits."""
    eventually(
        lambda: not isinstance(commit_outcome(consumer, offset), Exception),
        timeout_s=DEADLINE_S,
        what=f"a commit of {offset} succeeds",
    )


def offsets_partition_state(broker: BrokerProcess) -> tuple[int, int, tuple[int, ...]]:
    return partition_states(broker.bootstrap, OFFSETS_TOPIC)[0]


def test_a_commit_is_answered_only_once_the_offsets_partition_committed_it(
    brokers: dict[int, BrokerProcess],
) -> None:
    create_topic(brokers[1], TOPIC, 1)
    consumer = KafkaConsumer(
        bootstrap_servers=brokers[1].bootstrap, group_id=GROUP, enable_auto_commit=False
    )
    try:
        consumer.assign([KTopicPartition(TOPIC, 0)])
        commit_until_answered_ok(consumer, 3)
        coordinator, _epoch, isr = offsets_partition_state(brokers[1])
        assert sorted(isr) == [1, 2]
        follower = 2 if coordinator == 1 else 1
        assert committed_offsets(brokers[coordinator], GROUP) == {0: 3}

        paused = brokers[follower].process
        assert paused is not None
        pause(paused.pid)
        try:
            # with nothing appended a silent follower is not behind the leader's log end, so
            # it leaves when its session expires (a controller failover first if it was the
            # controller's broker)
            eventually(
                lambda: offsets_partition_state(brokers[coordinator])[2] == (coordinator,),
                timeout_s=2 * SESSION_TIMEOUT_MS / 1000 + 20,
                what="the paused follower leaves the offsets partition's ISR",
            )
            outcome = commit_outcome(consumer, 5)
            assert isinstance(outcome, CoordinatorNotAvailableError), outcome
            assert committed_offsets(brokers[coordinator], GROUP) == {0: 3}
            assert "error_code=not_enough_replicas" in brokers[coordinator].output()
        finally:
            os.kill(paused.pid, signal.SIGCONT)

        eventually(
            lambda: sorted(offsets_partition_state(brokers[coordinator])[2]) == [1, 2],
            timeout_s=DEADLINE_S + SESSION_TIMEOUT_MS / 1000,
            what="the follower back in the offsets partition's ISR",
        )
        commit_until_answered_ok(consumer, 7)
        assert committed_offsets(brokers[coordinator], GROUP) == {0: 7}
    finally:
        consumer.close()

    brokers[coordinator].kill()
    survivor = brokers[follower]
    eventually(
        lambda: offsets_partition_state(survivor)[0] == follower,
        timeout_s=SESSION_TIMEOUT_MS / 1000 + 15,
        what="the survivor leads the offsets partition",
    )
    assert eventually(
        lambda: committed_offsets(survivor, GROUP) == {0: 7},
        timeout_s=DEADLINE_S,
        what="the survivor serves the last commit",
    )
