"""A follower offline for a long time while the leader rolls many small segments. Broker 2
is ``A``, broker 3 is ``B`` (broker 1 is the controller).

While B's offsets are still in A's log, B fetches on from its log end across the segments A
rolled meanwhile, keeps what it had and rejoins the ISR::

    acks=all 0..4          A: 0-4:0                       B: 0-4:0
    kill B; 5..104         A: 0-4:0 5-104:1 (11 segments of 10 records; epoch 1: B's
                           death bumped it)
    start B                B fetches from 5: A, B: 0-4:0 5-104:1, ISR [2,3]

When A's retention meanwhile deleted past B's log end, B's fetch is OFFSET_OUT_OF_RANGE: B
restarts its log empty at A's log start, fetches the rest, and rejoins the ISR (the
partition state in ZooKeeper)::

    acks=all 0..4          A: 0-4:0                       B: 0-4:0
    kill B; 5..204         A: 160-204:1 (batches of 78 bytes; retention deletes the oldest
                           segments while what stays is at least retention.bytes, 3000:
                           45 records, 3510 bytes)
    start B                B: restarts at 160, fetches 160..204: A, B: 160-204:1, ISR [2,3]
"""

from __future__ import annotations

from pathlib import Path

from embedded.zookeeper import ZooKeeperEnsemble
from tests.scenarios.replication.stage import ReplicationStage

A, B = 2, 3
RECORDS_PER_SEGMENT = 10
# One record per batch, a fixed-size value: every batch is 78 bytes (61 of batch header, 17
# of record), on the leader and, copied as is, on the follower. A segment rolls when the next
# batch would pass segment.bytes, so every RECORDS_PER_SEGMENT records (the indexes, which
# also roll a segment when full, get no entry at the default index.interval.bytes).
BATCH_BYTES = 78
TOPIC_CONFIGS = {
    "min_insync_replicas": "1",
    "segment_bytes": str(BATCH_BYTES * RECORDS_PER_SEGMENT),
}
RETENTION_BYTES = "3000"


def values(first: int, last: int) -> list[str]:
    """Fixed-size values (so are the batches), ``first``..``last`` inclusive."""
    return [f"value-{offset:04d}" for offset in range(first, last + 1)]


def test_a_follower_back_after_the_leader_deleted_its_offsets_restarts_at_the_log_start(
    zookeeper: ZooKeeperEnsemble, tmp_path: Path
) -> None:
    topic = "offline-follower"
    with ReplicationStage(zookeeper, tmp_path) as stage:
        stage.create_topic(topic, (A, B), retention_bytes=RETENTION_BYTES, **TOPIC_CONFIGS)
        assert stage.produce(topic, values(0, 4), acks="all") == list(range(5))
        stage.expect(
            topic,
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
        stage.wait_state(topic, leader=A, isr=[A])
        assert stage.produce(topic, values(5, 204), acks="all") == list(range(5, 205))
        stage.expect(
            topic,
            """
            zk: leader=2 leader_epoch=1 isr=[2]
            broker 2 (up): hw=205 epochs=[1@160]
              160-204: 1
            broker 3 (down): hw=5 epochs=[0@0]
              0: 0
              1: 0
              2: 0
              3: 0
              4: 0
            """,
            step="B down; 200 more records; retention deleted A's oldest segments",
        )

        stage.start_broker(B)
        stage.wait_state(topic, leader=A, isr=[A, B])
        stage.expect(
            topic,
            """
            zk: leader=2 leader_epoch=1 isr=[2,3]
            broker 2 (up): hw=205 epochs=[1@160]
              160-204: 1
            broker 3 (up): hw=205 epochs=[1@160]
              160-204: 1
            """,
            step="B back: restarted at A's log start, caught up, in the ISR",
        )
        assert "restarting it empty" in stage.broker_log(B)
        consumed = stage.consume(topic)
        assert consumed == list(zip(range(160, 205), values(160, 204), strict=True))


def test_a_follower_back_while_the_leader_still_holds_its_offsets_fetches_from_its_log_end(
    zookeeper: ZooKeeperEnsemble, tmp_path: Path
) -> None:
    topic = "offline-follower-kept"
    with ReplicationStage(zookeeper, tmp_path) as stage:
        stage.create_topic(topic, (A, B), **TOPIC_CONFIGS)
        assert stage.produce(topic, values(0, 4), acks="all") == list(range(5))
        stage.expect(
            topic,
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
        stage.wait_state(topic, leader=A, isr=[A])
        assert stage.produce(topic, values(5, 104), acks="all") == list(range(5, 105))
        stage.expect(
            topic,
            """
            zk: leader=2 leader_epoch=1 isr=[2]
            broker 2 (up): hw=105 epochs=[0@0 1@5]
              0: 0
              1: 0
              2: 0
              3: 0
              4: 0
              5-104: 1
            broker 3 (down): hw=5 epochs=[0@0]
              0: 0
              1: 0
              2: 0
              3: 0
              4: 0
            """,
            step="B down; 100 more records over 10 more segments",
        )
        segments = sorted(stage.brokers[A].log_dir.glob(f"{topic}-0/*.log"))
        assert len(segments) == 11
        full = BATCH_BYTES * RECORDS_PER_SEGMENT
        assert {path.stat().st_size for path in segments[:-1]} == {full}

        stage.start_broker(B)
        stage.wait_state(topic, leader=A, isr=[A, B])
        stage.expect(
            topic,
            """
            zk: leader=2 leader_epoch=1 isr=[2,3]
            broker 2 (up): hw=105 epochs=[0@0 1@5]
              0: 0
              1: 0
              2: 0
              3: 0
              4: 0
              5-104: 1
            broker 3 (up): hw=105 epochs=[0@0 1@5]
              0: 0
              1: 0
              2: 0
              3: 0
              4: 0
              5-104: 1
            """,
            step="B back: fetched on from its log end, in the ISR",
        )
        assert "restarting it empty" not in stage.broker_log(B)
        assert stage.consume(topic) == list(zip(range(105), values(0, 104), strict=True))
