"""Remote retention by size and by time (Kafka's ``DeleteSegmentsByRetentionSizeTest`` and
``DeleteSegmentsByRetentionTimeTest``), run by ``storage-core tier --expire``.

Segments hold 10 records of ~780 bytes; ``local.retention.bytes=1000``.

By size, ``retention.bytes=2000`` counts the remote segments and the local-only bytes::

    produce 0..44            local: [0-9][10-19][20-29][30-39][40-44]*  remote: -
    tier                     local: [30-39][40-44]*   remote: [0-9][10-19][20-29][30-39]
    tier --expire            4 x 780 remote + 390 local-only - 2000 = 1510 bytes too many:
                             [0-9] goes (the next 780 would not fit in the 730 left)
                             local: [30-39][40-44]*   remote: [10-19][20-29][30-39]
                             log start 10: a consumer from earliest starts at 10

By time, records 0..19 are two hours old, the rest are new; ``retention.ms`` drops to one
hour once they are tiered::

    produce 0..34            local: [0-9][10-19][20-29][30-34]*       remote: -
    tier                     local: [20-29][30-34]*   remote: [0-9][10-19][20-29]
    retention.ms=3600000, tier --expire --dry-run: plans [0-9] and [10-19], changes nothing
    tier --expire            local: [20-29][30-34]*   remote: [20-29]
                             log start 20: a consumer from earliest starts at 20
"""

from __future__ import annotations

import time

from tests.scenarios.tiered import TieredStage, read_with_both_clients, topic_configs


def test_remote_segments_expire_by_retention_bytes(stage: TieredStage) -> None:
    topic = "retention-by-size"
    topic_id = stage.create_topic(
        topic,
        topic_configs(
            remote_storage_enable="true", local_retention_bytes="1000", retention_bytes="2000"
        ),
    )
    stage.produce(topic, 45)
    stage.expect(
        topic,
        topic_id,
        "local: [0-9][10-19][20-29][30-39][40-44]* remote: - | earliest=0 local=0 tiered=-1 end=45",
    )
    stage.tier(topic)
    stage.expect(
        topic,
        topic_id,
        "local: [30-39][40-44]* remote: [0-9][10-19][20-29][30-39]"
        " | earliest=0 local=30 tiered=39 end=45",
    )

    expired = stage.tier(topic, "--expire")
    assert expired[0] == (
        f"plan=expire partition={topic}-0 base_offset=0 end_offset=9 bytes=780"
        " reason=RETENTION_BYTES"
    )
    assert expired[1].startswith(
        f"partition={topic}-0 action=expire status=ok deleted=1 failed=0 bytes=780"
        " log_start_offset=10"
    )
    stage.expect(
        topic,
        topic_id,
        "local: [30-39][40-44]* remote: [10-19][20-29][30-39]"
        " | earliest=10 local=30 tiered=39 end=45",
    )
    assert read_with_both_clients(stage.bootstrap, topic, start=None) == list(range(10, 45))


def test_remote_segments_expire_by_retention_ms(stage: TieredStage) -> None:
    topic = "retention-by-time"
    topic_id = stage.create_topic(
        topic, topic_configs(remote_storage_enable="true", local_retention_bytes="1000")
    )
    now_ms = int(time.time() * 1000)
    stage.produce(topic, 20, timestamp_ms=now_ms - 2 * 3600_000)
    stage.produce(topic, 15, timestamp_ms=now_ms)
    stage.expect(
        topic,
        topic_id,
        "local: [0-9][10-19][20-29][30-34]* remote: - | earliest=0 local=0 tiered=-1 end=35",
    )
    stage.tier(topic)
    stage.expect(
        topic,
        topic_id,
        "local: [20-29][30-34]* remote: [0-9][10-19][20-29] | earliest=0 local=20 tiered=29 end=35",
    )

    stage.alter_topic(topic, retention_ms="3600000")
    plan = stage.tier(topic, "--expire", "--dry-run")
    assert [line.rsplit(" ", 1)[-1] for line in plan if line.startswith("plan=")] == [
        "reason=RETENTION_MS",
        "reason=RETENTION_MS",
    ]
    assert f"partition={topic}-0 action=expire status=planned segments=2" in plan[2]
    stage.expect(
        topic,
        topic_id,
        "local: [20-29][30-34]* remote: [0-9][10-19][20-29] | earliest=0 local=20 tiered=29 end=35",
    )

    stage.tier(topic, "--expire")
    stage.expect(
        topic,
        topic_id,
        "local: [20-29][30-34]* remote: [20-29] | earliest=20 local=20 tiered=29 end=35",
    )
    assert read_with_both_clients(stage.bootstrap, topic, start=None) == list(range(20, 35))
