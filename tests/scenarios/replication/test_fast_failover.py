"""KIP-279: leadership moves A -> B -> A before anyone catches up, so the returning follower
holds records of an epoch the leader never had, and the leader holds records of an epoch the
follower never had. One OffsetForLeaderEpoch answer cannot settle that: the follower truncates
over two rounds (KIP-279's loop), then fetches, and ends identical to the leader.

Broker 2 is ``A``, broker 3 is ``B`` (broker 1 is the controller). ``min.insync.replicas=1``
and unclean election on: a dead broker leaves the ISR (and the leader epoch moves), so only an
unclean election hands leadership back to a replica with a tail of its own::

    acks=all m0        A: 0:0               B: 0:0
    kill B; z          A: 0:0 1:1 (epoch 1, B gone from the ISR)
    kill A; start B    B leads at 3 (unclean); x: B: 0:0 1:3
    kill B; start A    A leads at 5 (unclean); y: A: 0:0 1:1 2:5
    start B            round 1: B fetches at 2 after epoch 3; A's largest epoch <= 3 is 1,
                       ending at 2 (its DivergingEpoch); B has no epoch 1, so it truncates
                       to where its epoch 0 ends (1), not done;
                       round 2: B fetches at 1 after epoch 0, which ends at 1 in A's log
                       too: done, the fetch brings z and y. A, B: 0:0 1:1 2:5
"""

from __future__ import annotations

from pathlib import Path

from embedded.zookeeper import ZooKeeperEnsemble
from tests.scenarios.replication.stage import ReplicationStage

A, B = 2, 3


def test_a_follower_with_an_epoch_the_leader_never_had_truncates_over_two_rounds(
    zookeeper: ZooKeeperEnsemble, tmp_path: Path
) -> None:
    topic = "fast-failover"
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
            step="m0 on both",
        )

        stage.kill(B)
        stage.wait_state(topic, leader=A, isr=[A])
        assert stage.produce(topic, ["z"], acks="all") == [1]
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
            step="B killed; A writes z at epoch 1",
        )
        stage.kill(A)
        stage.wait_state(topic, leader=-1, isr=[A])
        stage.start_broker(B)
        stage.wait_state(topic, leader=B, isr=[B])
        assert stage.produce(topic, ["x"], acks="all") == [1]
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
            step="A killed; B, back first, leads unclean and writes x at epoch 3",
        )
        stage.kill(B)
        stage.wait_state(topic, leader=-1, isr=[B])
        stage.start_broker(A)
        stage.wait_state(topic, leader=A, isr=[A])
        assert stage.produce(topic, ["y"], acks="all") == [2]
        stage.expect(
            topic,
            """
            zk: leader=2 leader_epoch=5 isr=[2]
            broker 2 (up): hw=3 epochs=[0@0 1@1 5@2]
              0: 0
              1: 1
              2: 5
            broker 3 (down): hw=2 epochs=[0@0 3@1]
              0: 0
              1: 3
            """,
            step="A -> B -> A: each wrote what the other never had",
        )

        stage.start_broker(B)
        stage.wait_state(topic, leader=A, isr=[A, B])
        stage.expect(
            topic,
            """
            zk: leader=2 leader_epoch=5 isr=[2,3]
            broker 2 (up): hw=3 epochs=[0@0 1@1 5@2]
              0: 0
              1: 1
              2: 5
            broker 3 (up): hw=3 epochs=[0@0 1@1 5@2]
              0: 0
              1: 1
              2: 5
            """,
            step="B back: truncated over two rounds, then fetched z and y",
        )
        log = stage.broker_log(B).splitlines()
        planned = [line for line in log if "replica_fetcher_thread truncating partition=" in line]
        done = [line for line in log if "storage_core.log.log truncating partition=" in line]
        assert len(planned) == 1 and len(done) == 1, "\n".join(planned + done)
        assert "leader_epoch=1 leader_end_offset=2 to_offset=1 completed=False" in planned[0]
        assert "to_offset=1 log_end_offset=2" in done[0]
        assert stage.consume(topic) == [(0, "m0"), (1, "z"), (2, "y")]
