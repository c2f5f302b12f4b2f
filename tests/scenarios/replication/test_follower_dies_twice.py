"""A follower that dies, comes back into the ISR, and dies again leaves the ISR again.
Broker 2 is ``A`` (the leader), broker 3 is ``B``; broker 1 is the controller::

    kill B             the controller takes B out of the ISR: [2], epoch 1
    start B            B catches up; A takes it back into the ISR (A writes that state
                       itself, the controller only sees the znode change)
    kill B again       the controller takes B out of the ISR again: [2], epoch 2; acks=all
                       produce goes on with A alone (before, the controller decided on its
                       stale copy of the ISR, [2], found B not in it, and left [2,3]: every
                       acks=all produce waited for the dead B and timed out)
"""

from __future__ import annotations

from pathlib import Path

from embedded.zookeeper import ZooKeeperEnsemble
from tests.scenarios.replication.stage import ReplicationStage

A, B = 2, 3
TOPIC = "dies-twice"


def test_a_follower_back_in_the_isr_leaves_it_again_when_it_dies_again(
    zookeeper: ZooKeeperEnsemble, tmp_path: Path
) -> None:
    with ReplicationStage(zookeeper, tmp_path) as stage:
        stage.create_topic(TOPIC, (A, B), min_insync_replicas="1")
        assert stage.produce(TOPIC, ["m0"]) == [0]
        stage.kill(B)
        stage.wait_state(TOPIC, leader=A, isr=[A])
        assert stage.produce(TOPIC, ["m1"]) == [1]
        stage.start_broker(B)
        stage.wait_state(TOPIC, leader=A, isr=[A, B])
        stage.expect(
            TOPIC,
            """
            zk: leader=2 leader_epoch=1 isr=[2,3]
            broker 2 (up): hw=2 epochs=[0@0 1@1]
              0: 0
              1: 1
            broker 3 (up): hw=2 epochs=[0@0 1@1]
              0: 0
              1: 1
            """,
            step="B back in the ISR",
        )

        stage.kill(B)
        stage.wait_state(TOPIC, leader=A, isr=[A])
        assert stage.produce(TOPIC, ["m2"]) == [2]
        stage.expect(
            TOPIC,
            """
            zk: leader=2 leader_epoch=2 isr=[2]
            broker 2 (up): hw=3 epochs=[0@0 1@1 2@2]
              0: 0
              1: 1
              2: 2
            broker 3 (down): hw=2 epochs=[0@0 1@1]
              0: 0
              1: 1
            """,
            step="B died a second time: out of the ISR again, m2 committed by A alone",
        )
