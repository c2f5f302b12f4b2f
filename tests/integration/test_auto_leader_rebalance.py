"""``auto.leader.rebalance.enable`` with three broker processes on a real ZooKeeper. A broker
that stops (its leaderships move away in the controlled shutdown) and starts again comes back
leading nothing; the controller gives its preferred leaderships back within
``leader.imbalance.check.interval.seconds`` once it is in sync again, when more than
``leader.imbalance.per.broker.percentage`` of the partitions it prefers are led by others
(Kafka's ``checkAndTriggerAutoLeaderRebalance``); not at the threshold, and never when the
rebalance is disabled."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka.admin import NewTopic

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
ISR_REJOIN_S = 30.0  # the returning broker catches up and rejoins every ISR


def states(brokers: dict[int, BrokerProcess]) -> dict[int, tuple[int, int, tuple[int, ...]]]:
    """partition -> (leader, leader epoch, ISR), the same on every broker given (else empty)."""
    answers = [cluster_support.partition_states(b.bootstrap, TOPIC) for b in brokers.values()]
    return answers[0] if all(a == answers[0] for a in answers) else {}


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
    with cluster_support.three_brokers(zookeeper, tmp_path, overrides) as (brokers, _):
        client = cluster_support.admin(brokers)
        eventually(lambda: len(client.describe_cluster().result(10).nodes) == 3, what="3 brokers")
        client.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=3)])[
            TOPIC
        ].result(30)
        # the broker that answered CreateTopics lists the topic; broker 2 may learn it a moment
        # later, and lists it only with every partition's leader (clients retry until then)
        prefers = eventually(
            lambda: (p := preferred(brokers)) and len(p) == PARTITIONS and p,
            what="broker 2 listing every partition of the new topic",
        )
        owned = sorted(p for p, b in prefers.items() if b == RETURNING)
        assert len(owned) == PARTITIONS // len(BROKER_IDS), prefers
        eventually(
            lambda: (s := states(brokers)) and all(s[p][0] == prefers[p] for p in prefers),
            what="every partition led by its preferred replica",
        )

        assert brokers[RETURNING].stop() == 0  # controlled shutdown: its leaderships move away
        others = {b: p for b, p in brokers.items() if b != RETURNING}
        moved = eventually(
            lambda: (
                (s := states(others)) and all(s[p][0] not in (RETURNING, -1) for p in owned) and s
            ),
            what=f"the partitions broker {RETURNING} led led by others",
        )
        brokers[RETURNING].start()
        back_at = time.monotonic()
        in_sync = eventually(
            lambda: rejoined(brokers, owned),
            timeout_s=ISR_REJOIN_S,
            what=f"broker {RETURNING} back in the ISR of every partition",
        )
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
            # one preferred election each since the move (it may come before every broker
            # shows the whole ISR): the epoch moved by one
            for p in owned:
                assert after[p][1] == moved[p][1] + 1, (p, moved[p], after[p])
        else:
            time.sleep(CHECK_INTERVAL_S * 3)  # three checks go by
            after = states(brokers)
            assert after, "the brokers disagree"
            assert [p for p in owned if after[p][0] == RETURNING] == [], after
            assert after == in_sync, (in_sync, after)  # nothing was elected
