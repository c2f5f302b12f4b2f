"""DeleteRecords moves the log start offset into the remote range (Kafka's
``DeleteSegmentsDueToLogStartOffsetBreachTest``); ``tier --expire`` then deletes the remote
segments wholly below it.

    produce 0..34, tier      local: [20-29][30-34]*   remote: [0-9][10-19][20-29]
    DeleteRecords(15)        log start 15, inside remote [10-19]: nothing deleted yet;
                             a consumer from earliest starts at 15 (read remotely)
    tier --expire            [0-9] ends below 15: remote: [10-19][20-29]
    DeleteRecords(25)        log start 25, inside local (and remote) [20-29]
    tier --expire            remote: [20-29]; from earliest: 25..34
"""

from __future__ import annotations

from tests.scenarios.tiered import TieredStage, read_with_both_clients, topic_configs

TOPIC = "delete-records"


def test_delete_records_moves_the_log_start_into_the_remote_range(stage: TieredStage) -> None:
    topic_id = stage.create_topic(
        TOPIC, topic_configs(remote_storage_enable="true", local_retention_bytes="1000")
    )
    stage.produce(TOPIC, 35)
    stage.tier(TOPIC)
    stage.expect(
        TOPIC,
        topic_id,
        "local: [20-29][30-34]* remote: [0-9][10-19][20-29] | earliest=0 local=20 tiered=29 end=35",
    )

    stage.delete_records(TOPIC, 15)
    stage.expect(
        TOPIC,
        topic_id,
        "local: [20-29][30-34]* remote: [0-9][10-19][20-29]"
        " | earliest=15 local=20 tiered=29 end=35",
    )
    assert read_with_both_clients(stage.bootstrap, TOPIC, start=None) == list(range(15, 35))

    expired = stage.tier(TOPIC, "--expire")
    assert expired[0].endswith("base_offset=0 end_offset=9 bytes=780 reason=LOG_START_OFFSET")
    stage.expect(
        TOPIC,
        topic_id,
        "local: [20-29][30-34]* remote: [10-19][20-29] | earliest=15 local=20 tiered=29 end=35",
    )

    stage.delete_records(TOPIC, 25)
    stage.tier(TOPIC, "--expire")
    stage.expect(
        TOPIC,
        topic_id,
        "local: [20-29][30-34]* remote: [20-29] | earliest=25 local=25 tiered=29 end=35",
    )
    assert read_with_both_clients(stage.bootstrap, TOPIC, start=None) == list(range(25, 35))
