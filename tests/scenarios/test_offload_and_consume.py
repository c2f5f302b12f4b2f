"""Offload, then consume from offset 0 with kafka-python and confluent-kafka, across a
broker restart (Kafka's ``OffloadAndConsumeFromLeaderTest``, driven by ``storage-core tier``).

Segments hold 10 records; ``local.retention.bytes=1000`` keeps about one closed segment
locally (a segment is ~780 bytes), and only once it has been copied::

    produce 0..24            local: [0-9][10-19][20-24]*     remote: -
    tier --dry-run           (nothing changes; the plan names [0-9] and [10-19])
    tier                     local: [10-19][20-24]*          remote: [0-9][10-19]
    tier                     (nothing left to copy)
    consume from 0           0..24, [0-19] read from the remote tier
    produce 25..34           local: [20-29][30-34]*          remote: [0-9][10-19]
                             ([20-29] stays: it is not copied yet)
    restart the broker       same picture; consume from 0 and from 15: same records
"""

from __future__ import annotations

from tests.scenarios.tiered import TieredStage, read_with_both_clients, topic_configs

TOPIC = "offload-and-consume"


def test_offload_then_consume_from_offset_zero_across_a_restart(stage: TieredStage) -> None:
    topic_id = stage.create_topic(
        TOPIC, topic_configs(remote_storage_enable="true", local_retention_bytes="1000")
    )
    stage.produce(TOPIC, 25)
    stage.expect(
        TOPIC,
        topic_id,
        "local: [0-9][10-19][20-24]* remote: - | earliest=0 local=0 tiered=-1 end=25",
    )

    plan = stage.tier(TOPIC, "--dry-run")
    assert [line for line in plan if line.startswith("plan=")] == [
        f"plan=copy partition={TOPIC}-0 base_offset=0 end_offset=9 bytes=780",
        f"plan=copy partition={TOPIC}-0 base_offset=10 end_offset=19 bytes=780",
    ]
    assert f"partition={TOPIC}-0 action=copy status=planned segments=2" in plan[-2]
    stage.expect(
        TOPIC,
        topic_id,
        "local: [0-9][10-19][20-24]* remote: - | earliest=0 local=0 tiered=-1 end=25",
    )

    copied = stage.tier(TOPIC)
    assert copied[0].startswith(
        f"partition={TOPIC}-0 action=copy status=ok segments=2 bytes=1560 offsets=0..19"
    )
    assert copied[-1].startswith("summary action=copy partitions=1 segments=2 bytes=1560 errors=0")
    stage.expect(
        TOPIC,
        topic_id,
        "local: [10-19][20-24]* remote: [0-9][10-19] | earliest=0 local=10 tiered=19 end=25",
    )
    again = stage.tier(TOPIC)
    assert f"partition={TOPIC}-0 action=copy status=ok segments=0" in again[0]

    assert read_with_both_clients(stage.bootstrap, TOPIC, start=0) == list(range(25))

    stage.produce(TOPIC, 10)
    stage.expect(
        TOPIC,
        topic_id,
        "local: [20-29][30-34]* remote: [0-9][10-19] | earliest=0 local=20 tiered=19 end=35",
    )

    stage.broker.restart()
    stage.expect(
        TOPIC,
        topic_id,
        "local: [20-29][30-34]* remote: [0-9][10-19] | earliest=0 local=20 tiered=19 end=35",
    )
    assert read_with_both_clients(stage.bootstrap, TOPIC, start=0) == list(range(35))
    assert read_with_both_clients(stage.bootstrap, TOPIC, start=15) == list(range(15, 35))
