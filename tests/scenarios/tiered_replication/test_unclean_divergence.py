"""KIP-405 follower scenarios 4 and 5: an unclean leader election with truncation, and the
log divergence it leaves in the remote tier. Broker 2 is ``A``, broker 3 is ``B`` (broker 1
is the controller); ``unclean.leader.election.enable=true``, ``min.insync.replicas=1``,
``local.retention.ms`` a few seconds (a copied segment leaves the local log once its records
are that old; the leader rolls an active segment that old, so segments roll by size while a
step produces)::

    acks=all m0 m1     A, B: 0-1:0
    kill B; r2..r5     A alone in the ISR, epoch 1: A 0-1:0 2-5:1, its segment 0-4 closed
                       (5 batches of 78 bytes fill segment.bytes=400)
    tier A             remote 0-4 [0@0 1@2] (A's); A deletes it locally: A 5:1
    kill A, start B    B elected unclean, epoch 2: r2..r5 gone; n2 n3 n4 (bigger records, one
                       segment each): B 0-1:0 2-4:2, lineage 0@0 2@2
    tier B             B's highest remote offset is 1 (A's epoch 0 capped where B's lineage
                       ends it): B copies 2-2 and 3-3, and deletes 0-1 2 3 locally (0-1
                       counts as copied: A's segment holds those same records)
    consume from 0     0 1 from A's remote segment, then n2 n3 n4: A's r2 r3 r4 of epoch 1, in
                       the same segment, are off B's lineage and never returned (scenario 5)
    tier B --expire    A's segment is off the lineage: deleted; B's log start moves to 2
    start A            A truncates (its epoch 0 ends at 2 in B's log, below its local start
                       5: everything), finds 2 moved to the remote tier, builds its state
                       from B's segment 3-3 and fetches from B's local start 4 (scenario 4)
"""

from __future__ import annotations

from pathlib import Path

from embedded.zookeeper import ZooKeeperEnsemble
from tests.scenarios.tiered_replication.stage import TieredStage
from tests.tiered_broker_support import EARLIEST, list_offset

A, B = 2, 3
TOPIC = "divergence"
# One record of a 10-byte value per batch: 78 bytes; five fill a segment of 400 bytes. B's
# records after the election carry 230 bytes (a batch of 298): one per segment.
SEGMENT_BYTES = "400"
# Above the time from m1 to r2 (B's session timeout of 4 s and the election, longer on a busy
# machine): were m0 m1's segment that old when r2 arrives, the leader would roll it alone.
LOCAL_RETENTION_MS = "10000"
BIG = "n" * 229


def test_a_deposed_leaders_remote_segment_is_never_read_past_the_lineage_and_expires(
    zookeeper: ZooKeeperEnsemble, tmp_path: Path
) -> None:
    with TieredStage(zookeeper, tmp_path) as stage:
        stage.create_topic(
            TOPIC,
            (A, B),
            min_insync_replicas="1",
            unclean_leader_election_enable="true",
            remote_storage_enable="true",
            segment_bytes=SEGMENT_BYTES,
            local_retention_ms=LOCAL_RETENTION_MS,
        )
        assert stage.produce(TOPIC, ["m0-abcdefg", "m1-abcdefg"]) == [0, 1]
        stage.expect(
            TOPIC,
            """
            zk: leader=2 leader_epoch=0 isr=[2,3]
            broker 2 (up): hw=2 epochs=[0@0]
              0: 0
              1: 0
            broker 3 (up): hw=2 epochs=[0@0]
              0: 0
              1: 0
            """,
            step="m0 m1 on both",
        )
        stage.kill(B)
        stage.wait_state(TOPIC, leader=A, isr=[A])
        assert stage.produce(TOPIC, [f"r{o}-abcdefg" for o in range(2, 6)]) == [2, 3, 4, 5]
        stage.tier(A)
        stage.expect(
            TOPIC,
            """
            zk: leader=2 leader_epoch=1 isr=[2]
            broker 2 (up): hw=6 epochs=[0@0 1@2]
              5: 1
            broker 3 (down): hw=2 epochs=[0@0]
              0: 0
              1: 0
            remote 0-4: epochs=[0@0 1@2] COPY_SEGMENT_FINISHED
            """,
            step="B killed, out of the ISR; A's 0-4 copied and deleted locally",
        )

        stage.kill(A)
        stage.start_broker(B)
        stage.wait_state(TOPIC, leader=B, isr=[B])
        assert stage.produce(TOPIC, [f"n{o}-{BIG}" for o in (2, 3, 4)]) == [2, 3, 4]
        stage.tier(B)
        stage.expect(
            TOPIC,
            """
            zk: leader=3 leader_epoch=2 isr=[3]
            broker 2 (down): hw=6 epochs=[0@0 1@2]
              5: 1
            broker 3 (up): hw=5 epochs=[0@0 2@2]
              4: 2
            remote 0-4: epochs=[0@0 1@2] COPY_SEGMENT_FINISHED
            remote 2-2: epochs=[2@2] COPY_SEGMENT_FINISHED
            remote 3-3: epochs=[2@3] COPY_SEGMENT_FINISHED
            """,
            step="A killed, B elected unclean; B's 2 and 3 copied, B's log local from 4",
        )
        lineage = [(0, "m0-abcdefg"), (1, "m1-abcdefg"), *((o, f"n{o}-{BIG}") for o in (2, 3, 4))]
        assert stage.consume(TOPIC) == lineage

        stage.tier(B, "--expire")
        stage.expect(
            TOPIC,
            """
            zk: leader=3 leader_epoch=2 isr=[3]
            broker 2 (down): hw=6 epochs=[0@0 1@2]
              5: 1
            broker 3 (up): hw=5 epochs=[2@2]
              4: 2
            remote 2-2: epochs=[2@2] COPY_SEGMENT_FINISHED
            remote 3-3: epochs=[2@3] COPY_SEGMENT_FINISHED
            """,
            step="expiry: A's segment off B's lineage deleted, B's log start 2",
        )
        assert list_offset(stage.brokers[B].bootstrap, TOPIC, EARLIEST)[0] == 2
        assert stage.consume(TOPIC) == lineage[2:]

        stage.start_broker(A)
        stage.wait_state(TOPIC, leader=B, isr=[A, B])
        stage.expect(
            TOPIC,
            """
            zk: leader=3 leader_epoch=2 isr=[2,3]
            broker 2 (up): hw=5 epochs=[2@2]
              4: 2
            broker 3 (up): hw=5 epochs=[2@2]
              4: 2
            remote 2-2: epochs=[2@2] COPY_SEGMENT_FINISHED
            remote 3-3: epochs=[2@3] COPY_SEGMENT_FINISHED
            """,
            step="A back: truncated, built from B's remote segment 3-3, fetched 4",
        )
        built = stage.broker_log(A)
        assert f"built the remote log auxiliary state partition={TOPIC}-0" in built
        assert "leader_local_log_start_offset=4 next_offset=4 log_start_offset=2" in built
