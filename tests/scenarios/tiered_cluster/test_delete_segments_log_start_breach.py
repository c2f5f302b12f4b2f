"""DeleteRecords moves the log start offset into the remote range, before and after a
leadership change (Kafka's ``DeleteSegmentsDueToLogStartOffsetBreachTest``), on two brokers,
replication factor 2, two records per segment. Remote deletions are run by the tiering job of
the partition's current leader (``storage-core tier --expire`` with its config).

    [1, 2], epoch 0; k0..k4, broker 1 tiers   remote {0,1},{2,3}; local earliest 4
    DeleteRecords(3), broker 1 expires        remote {2,3}; from 3: 3 (remote), 4
    broker 2 elected (epoch 1); k5..k9        broker 2 finds offset 3 copied by walking its
                                              own epochs back (1: none, 0: 3), copies
                                              {4,5},{6,7}; local earliest 8
    DeleteRecords(7), broker 2 expires        remote {6,7}; from 7: 7 (remote), 8, 9
"""

from __future__ import annotations

from tests.scenarios.tiered_cluster.stage import ClusterTieredStage, tiered_topic_configs
from tests.tiered_broker_support import LATEST_TIERED

TOPIC = "log-start-breach"


def test_delete_records_before_and_after_a_leadership_change(stage: ClusterTieredStage) -> None:
    topic_id = stage.create_topic(TOPIC, [[1, 2]], tiered_topic_configs(2))
    stage.produce(TOPIC, 0, 5)
    stage.expect(
        TOPIC,
        topic_id,
        "1: [0-1][2-3][4-4]* 2: [0-1][2-3][4-4]* remote: - | earliest=0 local=0 tiered=-1 end=5",
    )
    copied = stage.tier(1, TOPIC)
    assert copied[0].startswith(f"partition={TOPIC}-0 action=copy status=ok segments=2")
    assert "offsets=0..3" in copied[0]
    stage.expect(
        TOPIC,
        topic_id,
        "1: [4-4]* 2: [4-4]* remote: [0-1][2-3] | earliest=0 local=4 tiered=3 end=5",
    )

    stage.delete_records(TOPIC, 0, 3)
    expired = stage.tier(1, TOPIC, "--expire")
    assert expired[0].startswith(f"plan=expire partition={TOPIC}-0 base_offset=0 end_offset=1")
    assert expired[0].endswith("reason=LOG_START_OFFSET")
    assert not expired[1].startswith("plan=")
    stage.expect(
        TOPIC, topic_id, "1: [4-4]* 2: [4-4]* remote: [2-3] | earliest=3 local=4 tiered=3 end=5"
    )
    fetches = stage.remote_fetches(1)
    assert stage.consume(TOPIC, 0, 3) == [3, 4]
    assert stage.remote_fetches(1) - fetches == 1

    # Broker 2 leads in epoch 1 (broker 1 restarted cleanly: its reopened active segment at 4
    # counts index bytes afresh, as Kafka's, so it rolls at 7 where broker 2 rolls at 8); broker
    # 2's own job copies from offset 4 on, with no gap.
    assert stage.hand_over_leadership(TOPIC, 0) == 1
    stage.produce(TOPIC, 0, 5)
    assert stage.tier(1, TOPIC)[0] == (
        f'partition={TOPIC}-0 action=copy status=skipped reason="leader is broker 2, not 1"'
    )
    copied = stage.tier(2, TOPIC)
    assert copied[0].startswith(f"partition={TOPIC}-0 action=copy status=ok segments=2")
    assert "offsets=4..7" in copied[0]
    stage.expect(
        TOPIC,
        topic_id,
        "1: [7-8][9-9]* 2: [8-9]* remote: [2-3][4-5][6-7] | earliest=3 local=8 tiered=7 end=10",
    )
    assert stage.list_offset(TOPIC, 0, LATEST_TIERED) == (7, 1)

    stage.delete_records(TOPIC, 0, 7)
    assert stage.tier(1, TOPIC, "--expire")[0].startswith(
        f"partition={TOPIC}-0 action=expire status=skipped"
    )
    expired = stage.tier(2, TOPIC, "--expire")
    # 2 remote deletions ([2-3] holds only epoch 0, which broker 2's cache no longer starts
    # with once its log start is 7: it is below the lineage as well as below the log start)
    plans = sorted(line.split(" bytes=")[0] for line in expired if line.startswith("plan="))
    assert plans == [
        f"plan=expire partition={TOPIC}-0 base_offset=2 end_offset=3",
        f"plan=expire partition={TOPIC}-0 base_offset=4 end_offset=5",
    ]
    stage.expect(
        TOPIC,
        topic_id,
        "1: [7-8][9-9]* 2: [8-9]* remote: [6-7] | earliest=7 local=8 tiered=7 end=10",
    )
    fetches = stage.remote_fetches(2)
    assert stage.consume(TOPIC, 0, 7) == [7, 8, 9]
    assert stage.remote_fetches(2) - fetches == 1
