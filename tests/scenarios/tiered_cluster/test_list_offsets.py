"""ListOffsets of a tiered partition whose epochs span two leaders (Kafka's
``ListOffsetsTest``), on two brokers, replication factor 2, two records per segment, the
records' timestamps ts, ts+1, ...; ``(offset, leader epoch)`` as the leader answers them.

    [1, 2], epoch 0; k0..k2, broker 1 tiers   remote [0-1]
    broker 2 leads (epoch 1); k3..k5          broker 2 tiers [2-3] (k2 of epoch 0, k3 of 1)
    EARLIEST (0,0)  EARLIEST_LOCAL (1,4)  LATEST_TIERED (1,3)  LATEST (1,6)
    ts+6: none  ts+5: (1,5)  ts+3: (1,3) (remote)  ts: (0,0) (remote)
    DeleteRecords(3), broker 2 expires        EARLIEST (1,3)
    DeleteRecords(4), broker 2 expires        EARLIEST (1,4), LATEST_TIERED (no epoch, 3)
"""

from __future__ import annotations

import time

from tests.scenarios.harness.partitions import NO_EPOCH
from tests.scenarios.tiered_cluster.stage import ClusterTieredStage, tiered_topic_configs
from tests.tiered_broker_support import EARLIEST, EARLIEST_LOCAL, LATEST, LATEST_TIERED

TOPIC = "list-offsets"


def test_list_offsets_across_two_leaders_and_the_remote_tier(stage: ClusterTieredStage) -> None:
    ts = int(time.time() * 1000) - 60_000
    topic_id = stage.create_topic(TOPIC, [[1, 2]], tiered_topic_configs(2))
    stage.produce(TOPIC, 0, 3, timestamp_ms=ts)
    assert stage.tier(1, TOPIC)[0].startswith(
        f"partition={TOPIC}-0 action=copy status=ok segments=1 bytes="
    )
    stage.expect(
        TOPIC, topic_id, "1: [2-2]* 2: [2-2]* remote: [0-1] | earliest=0 local=2 tiered=1 end=3"
    )

    assert stage.hand_over_leadership(TOPIC, 0) == 1
    stage.produce(TOPIC, 0, 3, timestamp_ms=ts + 3)
    copied = stage.tier(2, TOPIC)
    assert copied[0].startswith(f"partition={TOPIC}-0 action=copy status=ok segments=1")
    assert "offsets=2..3" in copied[0]
    # broker 1's reopened active segment at 2 counts index bytes afresh (as Kafka's)
    stage.expect(
        TOPIC,
        topic_id,
        "1: [2-4][5-5]* 2: [4-5]* remote: [0-1][2-3] | earliest=0 local=4 tiered=3 end=6",
    )

    def offsets(spec: int) -> tuple[int, int]:
        return stage.list_offset(TOPIC, 0, spec)

    assert offsets(EARLIEST) == (0, 0)
    assert offsets(EARLIEST_LOCAL) == (4, 1)
    assert offsets(LATEST_TIERED) == (3, 1)
    assert offsets(LATEST) == (6, 1)
    assert offsets(ts + 6) == (-1, NO_EPOCH)
    assert offsets(ts + 5) == (5, 1)
    assert offsets(ts + 3) == (3, 1)  # in the remote segment [2-3]
    assert offsets(ts) == (0, 0)  # in the remote segment [0-1]

    stage.delete_records(TOPIC, 0, 3)
    stage.tier(2, TOPIC, "--expire")
    stage.expect(
        TOPIC,
        topic_id,
        "1: [2-4][5-5]* 2: [4-5]* remote: [2-3] | earliest=3 local=4 tiered=3 end=6",
    )
    assert offsets(EARLIEST) == (3, 1)

    stage.delete_records(TOPIC, 0, 4)
    stage.tier(2, TOPIC, "--expire")
    stage.expect(
        TOPIC, topic_id, "1: [2-4][5-5]* 2: [4-5]* remote: - | earliest=4 local=4 tiered=3 end=6"
    )
    assert offsets(EARLIEST) == (4, 1)
    assert offsets(EARLIEST_LOCAL) == (4, 1)
    assert offsets(LATEST_TIERED) == (3, NO_EPOCH)
    assert offsets(LATEST) == (6, 1)
