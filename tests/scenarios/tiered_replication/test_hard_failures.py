"""KIP-405 follower scenario 3: multiple hard failures, with KIP-101's semantics. Broker 2
is ``A`` (the first leader), broker 3 is ``B``; ``local.retention.ms`` a few seconds::

    acks=all 0..7; tier A  A, B: 5-7:0 (0-4 copied, then deleted locally by both)
    pause B; r8 acks=1     A: 5-8:0, HW 8: r8 is not committed
    kill A; resume B       A crashes; B (its fetches now fail) is elected, epoch 1, and rolls
                           its active segment (idle past local.retention.ms) at 8
    kill B                 B crashes too and loses its last record (7, not flushed: its
                           segment file is cut by one batch, and a segment it rolled after
                           it is gone, as a power failure leaves them);
                           no leader, epoch 2, B alone in the last ISR (B's epoch 1 starts
                           at 8, its log end offset when it became leader)
    keep local data        local.retention.ms raised until n10: B's active segment 5-6, idle
                           past the few seconds, must take n7-n9 (no roll on B's restart,
                           nor before n9 while A catches up: a loaded machine is slow there)
    start B                B leads in epoch 3: B 5-6:0; n7 n8 at epoch 3
    start A                A truncates to 7 (B's end of epoch 0) - r8, never committed, and
                           m7, lost with B's disk - fetches n7 n8 and rejoins the ISR
    n9 n10; tier B         B, the new leader, continues the remote chain at 5: 5-9 holds
                           epochs 0 and 3; the remote 0-4 of A kept as it was; with
                           local.retention.ms a few seconds again, both delete 5-9 locally
"""

from __future__ import annotations

import time
from pathlib import Path

from embedded.zookeeper import ZooKeeperEnsemble
from tests.scenarios.tiered_replication.stage import TieredStage

A, B = 2, 3
TOPIC = "hard-failures"
SEGMENT_BYTES = "400"  # five 78-byte batches (values of 10 bytes, one record each)
BATCH_BYTES = 78
LOCAL_RETENTION_MS = "6000"
KEEP_LOCAL_MS = "3600000"
FETCH_ANSWERED_S = 0.5
ROLLED_WITHIN_S = 1.0  # five runs of remote.log.manager.task.interval.ms


def values(first: int, last: int, prefix: str = "value") -> list[str]:
    return [f"{prefix}-{offset:04d}" for offset in range(first, last + 1)]


def lose_last_record(partition_dir: Path) -> None:
    """Cut the last batch (offset 7) off the segment holding it, and drop the empty segment
    B rolled after it while it led: neither was flushed."""
    logs = sorted(partition_dir.glob("*.log"))
    while logs[-1].stat().st_size == 0:
        empty = logs.pop()
        for path in partition_dir.glob(f"{empty.stem}.*"):
            path.unlink()
    size = logs[-1].stat().st_size
    assert logs[-1].stem == f"{5:020d}" and size == 3 * BATCH_BYTES, (logs, size)
    with logs[-1].open("r+b") as file:
        file.truncate(size - BATCH_BYTES)


def test_leader_and_follower_crash_the_remote_tier_keeps_what_was_committed(
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
        assert stage.produce(TOPIC, values(0, 7)) == list(range(8))
        stage.tier(A)
        stage.expect(
            TOPIC,
            """
            zk: leader=2 leader_epoch=0 isr=[2,3]
            broker 2 (up): hw=8 epochs=[0@0]
              5: 0
              6: 0
              7: 0
            broker 3 (up): hw=8 epochs=[0@0]
              5: 0
              6: 0
              7: 0
            remote 0-4: epochs=[0@0] COPY_SEGMENT_FINISHED
            """,
            step="0..7 on both; 0-4 copied and deleted locally by both",
        )

        stage.pause(B)
        time.sleep(FETCH_ANSWERED_S)
        assert stage.produce_raw(A, TOPIC, "r-0008", acks=1) == (0, 8)
        stage.kill(A)
        stage.resume(B)  # its fetches go to the dead A: r8 never reaches it
        stage.wait_state(TOPIC, leader=B, isr=[B])
        time.sleep(ROLLED_WITHIN_S)  # B rolls its active segment, idle past local.retention.ms
        stage.kill(B)
        lose_last_record(stage.brokers[B].log_dir / f"{TOPIC}-0")
        stage.expect(
            TOPIC,
            """
            zk: leader=-1 leader_epoch=2 isr=[3]
            broker 2 (down): hw=8 epochs=[0@0]
              5: 0
              6: 0
              7: 0
              8: 0
            broker 3 (down): hw=8 epochs=[0@0 1@8]
              5: 0
              6: 0
            remote 0-4: epochs=[0@0] COPY_SEGMENT_FINISHED
            """,
            step="A and B crashed; B lost its last record; no leader",
        )

        stage.alter_topic(TOPIC, local_retention_ms=KEEP_LOCAL_MS)
        stage.start_broker(B)
        stage.wait_state(TOPIC, leader=B, isr=[B])
        assert stage.produce(TOPIC, values(7, 8, "new")) == [7, 8]
        stage.start_broker(A)
        stage.wait_state(TOPIC, leader=B, isr=[A, B])
        stage.expect(
            TOPIC,
            """
            zk: leader=3 leader_epoch=3 isr=[2,3]
            broker 2 (up): hw=9 epochs=[0@0 3@7]
              5: 0
              6: 0
              7: 3
              8: 3
            broker 3 (up): hw=9 epochs=[0@0 3@7]
              5: 0
              6: 0
              7: 3
              8: 3
            remote 0-4: epochs=[0@0] COPY_SEGMENT_FINISHED
            """,
            step="B back first leads; A back truncated r8 and m7, fetched n7 n8",
        )

        assert stage.produce(TOPIC, values(9, 10, "new")) == [9, 10]
        stage.alter_topic(TOPIC, local_retention_ms=LOCAL_RETENTION_MS)
        stage.tier(B)
        stage.expect(
            TOPIC,
            """
            zk: leader=3 leader_epoch=3 isr=[2,3]
            broker 2 (up): hw=11 epochs=[0@0 3@7]
              10: 3
            broker 3 (up): hw=11 epochs=[0@0 3@7]
              10: 3
            remote 0-4: epochs=[0@0] COPY_SEGMENT_FINISHED
            remote 5-9: epochs=[0@5 3@7] COPY_SEGMENT_FINISHED
            """,
            step="B continued the remote chain: 5-9 copied, deleted locally by both",
        )
        expected = [*enumerate(values(0, 6)), *((o, f"new-{o:04d}") for o in range(7, 11))]
        assert stage.consume(TOPIC) == expected
