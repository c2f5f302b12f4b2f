"""KIP-405 follower scenarios 1 and 2: a brand-new follower builds its state from the remote
tier, then an out-of-sync follower catches up, from the leader's local log while it still
holds the follower's offsets, else through scenario 1. Broker 2 is ``A`` (the leader
throughout), broker 3 is ``B``; ``local.retention.ms`` a few seconds (a copied segment
leaves the local log once its records are that old)::

    acks=all 0..4        A, B: 0-4:0
    kill B, new disk     B's log dir is wiped (a replaced disk: a brand-new replica)
    5..14; tier A        A: epoch 1 (B's death bumped it); 0-4 and 5-9 copied, then deleted
                         locally: A 10-14:1
    start B (1)          B fetches 0: OFFSET_MOVED_TO_TIERED_STORAGE; the leader's local start
                         is 10, B builds its epochs from remote 5-9 and fetches 10-14
    kill B; 15..19       A: 15-19:2, nothing tiered meanwhile
    start B (2, local)   B's offset 15 is still in A's local log: plain fetching
    kill B; 20..29;      A: epoch 3; 10-14, 15-19 and 20-24 copied and deleted locally:
    tier A               A 25-29:3
    start B (2, remote)  B fetches 20, below A's local start: B truncates its whole log and
                         builds from remote 20-24 (through scenario 1)
    consume from 0       every record, 0-24 from the remote tier

Every step writes whole segments (five records; the last one stays active until the leader
rolls it after local.retention.ms idle), so the segments are the same however long a step
takes.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from embedded.zookeeper import ZooKeeperEnsemble
from tests.scenarios.tiered_replication.stage import TieredStage

A, B = 2, 3
TOPIC = "catch-up"
SEGMENT_BYTES = "400"  # five 78-byte batches (values of 10 bytes, one record each)
LOCAL_RETENTION_MS = "6000"


def values(first: int, last: int) -> list[str]:
    return [f"value-{offset:04d}" for offset in range(first, last + 1)]


def test_a_new_follower_and_out_of_sync_followers_catch_up_through_the_remote_tier(
    zookeeper: ZooKeeperEnsemble, tmp_path: Path
) -> None:
    with TieredStage(zookeeper, tmp_path) as stage:
        stage.create_topic(
            TOPIC,
            (A, B),
            min_insync_replicas="1",
            remote_storage_enable="true",
            segment_bytes=SEGMENT_BYTES,
            local_retention_ms=LOCAL_RETENTION_MS,
        )
        assert stage.produce(TOPIC, values(0, 4)) == list(range(5))
        stage.expect(
            TOPIC,
            """
            zk: leader=2 leader_epoch=0 isr=[2,3]
            broker 2 (up): hw=5 epochs=[0@0]
              0: 0
              1: 0
              2: 0
              3: 0
              4: 0
            broker 3 (up): hw=5 epochs=[0@0]
              0: 0
              1: 0
              2: 0
              3: 0
              4: 0
            """,
            step="0..4 on both",
        )

        stage.kill(B)
        shutil.rmtree(stage.brokers[B].log_dir)
        stage.wait_state(TOPIC, leader=A, isr=[A])
        assert stage.produce(TOPIC, values(5, 14)) == list(range(5, 15))
        stage.tier(A)
        stage.expect(
            TOPIC,
            """
            zk: leader=2 leader_epoch=1 isr=[2]
            broker 2 (up): hw=15 epochs=[0@0 1@5]
              10: 1
              11: 1
              12: 1
              13: 1
              14: 1
            broker 3 (down): hw=- epochs=[]
            remote 0-4: epochs=[0@0] COPY_SEGMENT_FINISHED
            remote 5-9: epochs=[1@5] COPY_SEGMENT_FINISHED
            """,
            step="B's disk replaced; 0-9 tiered and deleted from A's local log",
        )

        stage.start_broker(B)
        stage.wait_state(TOPIC, leader=A, isr=[A, B])
        stage.expect(
            TOPIC,
            """
            zk: leader=2 leader_epoch=1 isr=[2,3]
            broker 2 (up): hw=15 epochs=[0@0 1@5]
              10: 1
              11: 1
              12: 1
              13: 1
              14: 1
            broker 3 (up): hw=15 epochs=[0@0 1@5]
              10: 1
              11: 1
              12: 1
              13: 1
              14: 1
            remote 0-4: epochs=[0@0] COPY_SEGMENT_FINISHED
            remote 5-9: epochs=[1@5] COPY_SEGMENT_FINISHED
            """,
            step="scenario 1: the new B built its epochs from remote 5-9, fetched 10-14",
        )
        log = stage.broker_log(B)
        assert f"built the remote log auxiliary state partition={TOPIC}-0" in log
        assert "leader_local_log_start_offset=10 next_offset=10 log_start_offset=0" in log

        stage.kill(B)
        stage.wait_state(TOPIC, leader=A, isr=[A])
        assert stage.produce(TOPIC, values(15, 19)) == list(range(15, 20))
        stage.start_broker(B)
        stage.wait_state(TOPIC, leader=A, isr=[A, B])
        stage.expect(
            TOPIC,
            """
            zk: leader=2 leader_epoch=2 isr=[2,3]
            broker 2 (up): hw=20 epochs=[0@0 1@5 2@15]
              10: 1
              11: 1
              12: 1
              13: 1
              14: 1
              15: 2
              16: 2
              17: 2
              18: 2
              19: 2
            broker 3 (up): hw=20 epochs=[0@0 1@5 2@15]
              10: 1
              11: 1
              12: 1
              13: 1
              14: 1
              15: 2
              16: 2
              17: 2
              18: 2
              19: 2
            remote 0-4: epochs=[0@0] COPY_SEGMENT_FINISHED
            remote 5-9: epochs=[1@5] COPY_SEGMENT_FINISHED
            """,
            step="scenario 2, local: B back while A still holds 15, fetched 15-19",
        )
        assert stage.broker_log(B).count("built the remote log auxiliary state") == 1

        stage.kill(B)
        stage.wait_state(TOPIC, leader=A, isr=[A])
        assert stage.produce(TOPIC, values(20, 29)) == list(range(20, 30))
        stage.tier(A)
        stage.expect(
            TOPIC,
            """
            zk: leader=2 leader_epoch=3 isr=[2]
            broker 2 (up): hw=30 epochs=[0@0 1@5 2@15 3@20]
              25: 3
              26: 3
              27: 3
              28: 3
              29: 3
            broker 3 (down): hw=20 epochs=[0@0 1@5 2@15]
              10: 1
              11: 1
              12: 1
              13: 1
              14: 1
              15: 2
              16: 2
              17: 2
              18: 2
              19: 2
            remote 0-4: epochs=[0@0] COPY_SEGMENT_FINISHED
            remote 5-9: epochs=[1@5] COPY_SEGMENT_FINISHED
            remote 10-14: epochs=[1@10] COPY_SEGMENT_FINISHED
            remote 15-19: epochs=[2@15] COPY_SEGMENT_FINISHED
            remote 20-24: epochs=[3@20] COPY_SEGMENT_FINISHED
            """,
            step="B down; 20..29 at epoch 3, 10-24 tiered and deleted from A's local log",
        )

        stage.start_broker(B)
        stage.wait_state(TOPIC, leader=A, isr=[A, B])
        stage.expect(
            TOPIC,
            """
            zk: leader=2 leader_epoch=3 isr=[2,3]
            broker 2 (up): hw=30 epochs=[0@0 1@5 2@15 3@20]
              25: 3
              26: 3
              27: 3
              28: 3
              29: 3
            broker 3 (up): hw=30 epochs=[0@0 1@5 2@15 3@20]
              25: 3
              26: 3
              27: 3
              28: 3
              29: 3
            remote 0-4: epochs=[0@0] COPY_SEGMENT_FINISHED
            remote 5-9: epochs=[1@5] COPY_SEGMENT_FINISHED
            remote 10-14: epochs=[1@10] COPY_SEGMENT_FINISHED
            remote 15-19: epochs=[2@15] COPY_SEGMENT_FINISHED
            remote 20-24: epochs=[3@20] COPY_SEGMENT_FINISHED
            """,
            step="scenario 2, remote: B truncated everything, built from 20-24, fetched 25-29",
        )
        assert "leader_local_log_start_offset=25 next_offset=25" in stage.broker_log(B)
        assert stage.consume(TOPIC) == list(enumerate(values(0, 29)))
