"""The high watermark stories of KIP-101 (seed 003): where truncating to the high watermark
loses or forks data, and how truncating by leader epoch does not. Broker 2 is ``A``, broker
3 is ``B``; broker 1 is the controller and holds no replica.

Case 1, data loss. A and B both hold m0, m1 and the producer has its acks=all answer, but the
HW B checkpointed is older (B learns the HW a fetch later and writes the checkpoint every
``replica.high.watermark.checkpoint.interval.ms``, an hour here). B crashes and comes back
while A cannot answer (paused). Truncating to its HW, B would drop m1 and, once A dies, lead
without it. B keeps m1 (its epochs match the leader's, nothing to truncate), rejoins the ISR,
and leads with m0, m1 when A dies::

    acks=all m0 m1     A: 0:0 1:0             B: 0:0 1:0   (B's checkpointed hw: none)
    kill B, pause A,   B restarts: 0:0 1:0 kept
    start B
    resume A, kill A   B leads (clean: in the ISR): 0:0 1:0, consumers read m0 m1

Case 2, divergence (min.insync.replicas=1). B crashes first, so the ISR is A alone and m1 is
committed on A (HW 2); then A crashes. B comes back first: it is not in the ISR, so only an
unclean election (the topic allows it) lets it lead; it takes m1' at its new epoch. A comes
back with HW 2: truncating to its HW would keep m1 and the logs would differ at offset 1
forever. A truncates at the epoch boundary instead (its epoch 1 ends at 1 in B's log), below
its HW, and fetches m1'::

    acks=all m0        A: 0:0                 B: 0:0
    kill B; m1         A: 0:0 1:1 (hw 2)
    kill A; start B    B leads (unclean) at epoch 3; m1': B: 0:0 1:3
    start A            A: 0:0 1:3 (m1 truncated at the epoch boundary, below its hw 2)
"""

from __future__ import annotations

from pathlib import Path

from embedded.zookeeper import ZooKeeperEnsemble
from tests.scenarios.replication.stage import ReplicationStage

A, B = 2, 3


def test_a_restarted_follower_keeps_what_its_stale_high_watermark_does_not_cover(
    zookeeper: ZooKeeperEnsemble, tmp_path: Path
) -> None:
    topic = "hw-loss"
    overrides = {"replica.high.watermark.checkpoint.interval.ms": "3600000"}
    with ReplicationStage(zookeeper, tmp_path, overrides=overrides) as stage:
        stage.create_topic(topic, (A, B), min_insync_replicas="2")
        assert stage.produce(topic, ["m0", "m1"], acks="all") == [0, 1]
        stage.kill(B)
        stage.expect(
            topic,
            """
            zk: leader=2 leader_epoch=0 isr=[2,3]
            broker 2 (up): hw=- epochs=[0@0]
              0: 0
              1: 0
            broker 3 (down): hw=- epochs=[0@0]
              0: 0
              1: 0
            """,
            step="m0, m1 acknowledged by the ISR; B killed with no HW checkpointed",
        )

        stage.wait_deregistered(B)
        stage.wait_state(topic, leader=A, isr=[A])
        stage.pause(A)
        stage.start_broker(B)
        stage.expect(
            topic,
            """
            zk: leader=2 leader_epoch=1 isr=[2]
            broker 2 (paused): hw=- epochs=[0@0 1@2]
              0: 0
              1: 0
            broker 3 (up): hw=- epochs=[0@0]
              0: 0
              1: 0
            """,
            step="A paused; B restarted: m1 kept above its checkpointed HW",
        )
        stage.resume(A)
        stage.wait_state(topic, leader=A, isr=[A, B])

        stage.kill(A)
        stage.wait_state(topic, leader=B, isr=[B])
        stage.expect(
            topic,
            """
            zk: leader=3 leader_epoch=2 isr=[3]
            broker 2 (down): hw=- epochs=[0@0 1@2]
              0: 0
              1: 0
            broker 3 (up): hw=- epochs=[0@0 2@2]
              0: 0
              1: 0
            """,
            step="A killed: B leads with m1",
        )
        assert stage.consume(topic) == [(0, "m0"), (1, "m1")]

        assert stage.produce(topic, ["m2"], acks=1) == [2]
        stage.start_broker(A)
        stage.wait_state(topic, leader=B, isr=[A, B])
        stage.expect(
            topic,
            """
            zk: leader=3 leader_epoch=2 isr=[2,3]
            broker 2 (up): hw=- epochs=[0@0 2@2]
              0: 0
              1: 0
              2: 2
            broker 3 (up): hw=- epochs=[0@0 2@2]
              0: 0
              1: 0
              2: 2
            """,
            step="A restarted follows B: identical",
        )
        assert stage.consume(topic) == [(0, "m0"), (1, "m1"), (2, "m2")]


def test_a_returning_leader_truncates_its_divergent_tail_at_the_epoch_boundary(
    zookeeper: ZooKeeperEnsemble, tmp_path: Path
) -> None:
    topic = "hw-divergence"
    with ReplicationStage(zookeeper, tmp_path) as stage:
        stage.create_topic(
            topic, (A, B), min_insync_replicas="1", unclean_leader_election_enable="true"
        )
        assert stage.produce(topic, ["m0"], acks="all") == [0]
        stage.expect(
            topic,
            """
            zk: leader=2 leader_epoch=0 isr=[2,3]
            broker 2 (up): hw=1 epochs=[0@0]
              0: 0
            broker 3 (up): hw=1 epochs=[0@0]
              0: 0
            """,
            step="m0 committed and both HWs checkpointed",
        )
        stage.kill(B)
        stage.wait_deregistered(B)
        stage.wait_state(topic, leader=A, isr=[A])
        assert stage.produce(topic, ["m1"], acks="all") == [1]
        stage.expect(
            topic,
            """
            zk: leader=2 leader_epoch=1 isr=[2]
            broker 2 (up): hw=2 epochs=[0@0 1@1]
              0: 0
              1: 1
            broker 3 (down): hw=1 epochs=[0@0]
              0: 0
            """,
            step="B crashed; m1 committed by the ISR of A alone",
        )

        stage.kill(A)
        stage.wait_deregistered(A)
        stage.wait_state(topic, leader=-1, isr=[A])
        stage.start_broker(B)
        stage.wait_state(topic, leader=B, isr=[B])
        assert "unclean leader election" in stage.broker_log(1)
        assert stage.produce(topic, ["m1'"], acks="all") == [1]
        stage.expect(
            topic,
            """
            zk: leader=3 leader_epoch=3 isr=[3]
            broker 2 (down): hw=2 epochs=[0@0 1@1]
              0: 0
              1: 1
            broker 3 (up): hw=2 epochs=[0@0 3@1]
              0: 0
              1: 3
            """,
            step="A crashed too; B back first, elected unclean, takes m1'",
        )

        stage.start_broker(A)
        stage.wait_state(topic, leader=B, isr=[A, B])
        stage.expect(
            topic,
            """
            zk: leader=3 leader_epoch=3 isr=[2,3]
            broker 2 (up): hw=2 epochs=[0@0 3@1]
              0: 0
              1: 3
            broker 3 (up): hw=2 epochs=[0@0 3@1]
              0: 0
              1: 3
            """,
            step="A back: m1 truncated at the epoch boundary (below its HW), m1' fetched",
        )
        assert "truncated below the high watermark" in stage.broker_log(A)
        assert stage.consume(topic) == [(0, "m0"), (1, "m1'")]
