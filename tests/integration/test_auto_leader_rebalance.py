"""``auto.leader.rebalance.enable`` with three broker processes on a real ZooKeeper. A broker
that stops (its leaderships move away in the controlled shutdown) and starts again comes back
leading nothing; the controller gives its preferred leaderships back within
``leader.imbalance.check.interval.seconds`` once it is in sync again, when more than
``leader.imbalance.per.broker.percentage`` of the partitions it prefers are led by others
(Kafka's ``checkAndTriggerAutoLeaderRebalance``); not at the threshold, and never when the
rebalance is disabled."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import NewTopic
from kazoo.client import KazooClient

from embedded.zookeeper import ZooKeeperEnsemble
from tests import cluster_support
from tests.broker_process import BrokerProcess
from tests.cluster_support import BROKER_IDS, eventually

cluster_support.require_java()

pytestmark = pytest.mark.timeout(180)

TOPIC = "balanced"
PARTITIONS = 6
CHECK_INTERVAL_S = 3
RETURNING = 1
ISR_REJOIN_S = 8.0  # the returning broker catches up and rejoins every ISR


def states(brokers: dict[int, BrokerProcess]) -> dict[int, tuple[int, int, tuple[int, ...]]]:
    """partition -> (leader, leader epoch, ISR), the same on every broker (else empty)."""
    answers = [cluster_support.partition_states(b.bootstrap, TOPIC) for b in brokers.values()]
    return answers[0] if all(a == answers[0] for a in answers) else {}


def expand_isr_as_the_leader_does(connect: str, partitions: list[int], broker_id: int) -> None:
    """What a partition leader writes in Kafka's ZooKeeper mode once a follower has caught up
    (``ReplicationUtils.updateLeaderAndIsr``): the same state with the follower added to the
    ISR, only if the znode did not move meanwhile. Used only while the brokers here do not
    expand ISRs themselves yet (the returning broker has no data to catch up on)."""
    zk = KazooClient(hosts=connect, timeout=10)
    zk.start(timeout=15)
    try:
        for partition in partitions:
            path = f"/brokers/topics/{TOPIC}/partitions/{partition}/state"
            data, stat = zk.get(path)
            state = json.loads(data)
            if broker_id not in state["isr"]:
                state["isr"] = [*state["isr"], broker_id]
                zk.set(path, json.dumps(state).encode(), version=stat.version)
    finally:
        zk.stop()
        zk.close()


def rejoined(
    brokers: dict[int, BrokerProcess], partitions: list[int]
) -> dict[int, tuple[int, int, tuple[int, ...]]]:
    return (s := states(brokers)) and all(RETURNING in s[p][2] for p in partitions) and s


def preferred(brokers: dict[int, BrokerProcess]) -> dict[int, int]:
    """partition -> its preferred leader (the first assigned replica), from Metadata."""
    (topic,) = cluster_support.metadata(brokers[2].bootstrap, TOPIC).topics
    return {p.partition_index: p.replica_nodes[0] for p in topic.partitions}


@pytest.mark.parametrize(
    ("enable", "percentage", "rebalanced"),
    [
        pytest.param("true", 10, True, id="enabled-imbalance-above-percentage"),
        pytest.param("true", 100, False, id="enabled-imbalance-at-percentage"),
        pytest.param("false", 10, False, id="disabled"),
    ],
)
def test_preferred_leaders_come_back_after_a_restart_only_when_the_imbalance_is_too_high(
    zookeeper: ZooKeeperEnsemble, tmp_path: Path, enable: str, percentage: int, rebalanced: bool
) -> None:
    overrides = {
        "auto.leader.rebalance.enable": enable,
        "leader.imbalance.check.interval.seconds": str(CHECK_INTERVAL_S),
        "leader.imbalance.per.broker.percentage": str(percentage),
        # the returning broker stays in sync while the checks go by (it has nothing to fetch)
        "replica.lag.time.max.ms": "120000",
    }
    with cluster_support.three_brokers(zookeeper, tmp_path, overrides) as (brokers, connect):
        client = cluster_support.admin(brokers)
        eventually(lambda: len(client.describe_cluster().result(10).nodes) == 3, what="3 brokers")
        client.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=3)])[
            TOPIC
        ].result(30)
        prefers = preferred(brokers)
        owned = sorted(p for p, b in prefers.items() if b == RETURNING)
        assert len(owned) == PARTITIONS // len(BROKER_IDS), prefers
        eventually(
            lambda: (s := states(brokers)) and all(s[p][0] == prefers[p] for p in prefers),
            what="every partition led by its preferred replica",
        )

        assert brokers[RETURNING].stop() == 0  # controlled shutdown: its leaderships move away
        brokers[RETURNING].start()
        back_at = time.monotonic()
        try:
            in_sync = eventually(
                lambda: rejoined(brokers, owned),
                timeout_s=ISR_REJOIN_S,
                what=f"broker {RETURNING} back in the ISR of every partition",
            )
        except AssertionError:
            print(f"\nbroker {RETURNING} did not rejoin the ISRs: written as its leaders would")
            expand_isr_as_the_leader_does(connect, owned, RETURNING)
            in_sync = eventually(lambda: rejoined(brokers, owned), what="the ISRs on every broker")
        in_sync_at = time.monotonic()

        if rebalanced:
            after = eventually(
                lambda: (
                    (s := states(brokers)) and all(s[p][0] == prefers[p] for p in prefers) and s
                ),
                timeout_s=CHECK_INTERVAL_S + 5.0,
                poll_s=0.1,
                what=f"broker {RETURNING} leading its preferred partitions again",
            )
            print(
                f"\nauto leader rebalance: broker {RETURNING} in sync {in_sync_at - back_at:.2f} s"
                f" after its start, preferred leaders back {time.monotonic() - in_sync_at:.2f} s"
                " later"
                f" (leader.imbalance.check.interval.seconds={CHECK_INTERVAL_S})"
            )
            for p in owned:  # one preferred election each: the epoch moved by one
                assert after[p][1] == in_sync[p][1] + 1, (p, in_sync[p], after[p])
        else:
            time.sleep(CHECK_INTERVAL_S * 3)  # three checks go by
            after = states(brokers)
            assert after, "the brokers disagree"
            assert [p for p in owned if after[p][0] == RETURNING] == [], after
            assert after == in_sync, (in_sync, after)  # nothing was elected
