"""Unclean leader election: the ISR shrinks to the leader alone, the leader dies, and only a
replica out of the ISR is left. Two topics on brokers 2 (``A``) and 3 (``B``), both with
``min.insync.replicas=1``, one with ``unclean.leader.election.enable=true``, one without;
broker 1 is the controller::

    acks=all m0 m1     A: 0:0 1:0               B: 0:0 1:0
    pause B, r2        A drops B from the ISR replica.lag.time.max.ms after r2 (a follower
                       at the leader's end stays in sync however long it is silent); r3
                       (acks=all) is committed by the ISR of A alone: A: 0:0 1:0 2:0 3:0
    kill A, resume B   unclean on: B is elected (epoch + 1, logged as a data-loss risk);
                       r2 r3 are gone for consumers; n2 is written at the new epoch
                       unclean off: no leader (-1), Metadata answers LEADER_NOT_AVAILABLE,
                       B refuses produce with NOT_LEADER_OR_FOLLOWER, until ElectLeaders
                       UNCLEAN elects B
    start A            A truncates r2 r3 (its epoch 0 ends at 2 in B's log), fetches n2,
                       rejoins the ISR: A, B: 0:0 1:0 2:<B's epoch>
"""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import ElectionType
from kio.schema.errors import ErrorCode

from embedded.zookeeper import ZooKeeperEnsemble
from tests.scenarios.replication.stage import ReplicationStage

A, B = 2, 3
ON, OFF = "unclean-on", "unclean-off"
# B stays paused past replica.lag.time.max.ms but well inside its ZooKeeper session.
OVERRIDES = {"zookeeper.session.timeout.ms": "8000", "replica.lag.time.max.ms": "1000"}
FETCH_ANSWERED_S = 0.5  # > replica.fetch.wait.max.ms (stage.SETTINGS)


def test_an_out_of_sync_replica_leads_only_where_unclean_election_is_enabled(
    zookeeper: ZooKeeperEnsemble, tmp_path: Path
) -> None:
    with ReplicationStage(zookeeper, tmp_path, overrides=OVERRIDES) as stage:
        stage.create_topic(
            ON, (A, B), min_insync_replicas="1", unclean_leader_election_enable="true"
        )
        stage.create_topic(OFF, (A, B), min_insync_replicas="1")
        for topic in (ON, OFF):
            assert stage.produce(topic, ["m0", "m1"], acks="all") == [0, 1]
            stage.expect(
                topic,
                """
                zk: leader=2 leader_epoch=0 isr=[2,3]
                broker 2 (up): hw=2 epochs=[0@0]
                  0: 0
                  1: 0
                broker 3 (up): hw=2 epochs=[0@0]
                  0: 0
                  1: 0
                """,
                step="m0 m1 on both replicas",
            )

        stage.pause(B)
        # B's fetch already waiting at A answers (empty) within replica.fetch.wait.max.ms;
        # were r2 in that answer, B would read it from its socket when it resumes.
        time.sleep(FETCH_ANSWERED_S)
        # A follower at the leader's end offset is in sync however long it is silent: r2 gives
        # B something to lag behind. Clients would ask the paused B for metadata and wait:
        # these go straight to A.
        for topic in (ON, OFF):
            assert stage.produce_raw(A, topic, "r2", acks=1) == (0, 2)
        for topic in (ON, OFF):
            stage.wait_state(topic, leader=A, isr=[A])
            assert stage.produce_raw(A, topic, "r3", acks=-1) == (0, 3)
            stage.expect(
                topic,
                """
                zk: leader=2 leader_epoch=0 isr=[2]
                broker 2 (up): hw=4 epochs=[0@0]
                  0: 0
                  1: 0
                  2: 0
                  3: 0
                broker 3 (paused): hw=2 epochs=[0@0]
                  0: 0
                  1: 0
                """,
                step="B paused, out of the ISR; r2 r3 committed by A alone",
            )
        stage.kill(A)
        stage.resume(B)

        stage.wait_state(ON, leader=B, isr=[B])
        risk = "unclean leader election: records acknowledged by the old ISR may be lost"
        assert f"{risk}, partition={ON}-0" in stage.broker_log(1)
        assert stage.produce(ON, ["n2"], acks="all") == [2]
        stage.expect(
            ON,
            """
            zk: leader=3 leader_epoch=1 isr=[3]
            broker 2 (down): hw=4 epochs=[0@0]
              0: 0
              1: 0
              2: 0
              3: 0
            broker 3 (up): hw=3 epochs=[0@0 1@2]
              0: 0
              1: 0
              2: 1
            """,
            step="A killed: B elected unclean, r2 r3 gone, n2 at epoch 1",
        )
        assert stage.consume(ON) == [(0, "m0"), (1, "m1"), (2, "n2")]

        stage.wait_state(OFF, leader=-1, isr=[A])
        assert stage.metadata_leader(B, OFF) == (-1, ErrorCode.leader_not_available.value)
        refused = stage.produce_raw(B, OFF, "refused")
        assert refused == (ErrorCode.not_leader_or_follower.value, -1)
        stage.expect(
            OFF,
            """
            zk: leader=-1 leader_epoch=1 isr=[2]
            broker 2 (down): hw=4 epochs=[0@0]
              0: 0
              1: 0
              2: 0
              3: 0
            broker 3 (up): hw=2 epochs=[0@0]
              0: 0
              1: 0
            """,
            step="A killed: no leader, B is not in the ISR",
        )
        stage.elect(OFF, ElectionType.UNCLEAN)
        stage.wait_state(OFF, leader=B, isr=[B])
        assert stage.produce(OFF, ["n2"], acks="all") == [2]
        stage.expect(
            OFF,
            """
            zk: leader=3 leader_epoch=2 isr=[3]
            broker 2 (down): hw=4 epochs=[0@0]
              0: 0
              1: 0
              2: 0
              3: 0
            broker 3 (up): hw=3 epochs=[0@0 2@2]
              0: 0
              1: 0
              2: 2
            """,
            step="ElectLeaders UNCLEAN: B leads, n2 at epoch 2",
        )
        assert stage.consume(OFF) == [(0, "m0"), (1, "m1"), (2, "n2")]

        stage.start_broker(A)
        for topic, epoch in ((ON, 1), (OFF, 2)):
            stage.wait_state(topic, leader=B, isr=[A, B])
            stage.expect(
                topic,
                f"""
                zk: leader=3 leader_epoch={epoch} isr=[2,3]
                broker 2 (up): hw=3 epochs=[0@0 {epoch}@2]
                  0: 0
                  1: 0
                  2: {epoch}
                broker 3 (up): hw=3 epochs=[0@0 {epoch}@2]
                  0: 0
                  1: 0
                  2: {epoch}
                """,
                step="A back: r2 r3 truncated, n2 fetched, in the ISR again",
            )
