"""Enabling remote storage on a topic that already holds data (Kafka's
``EnableRemoteLogOnTopicTest``).

    create without remote storage, produce 0..24
                             local: [0-9][10-19][20-24]*   remote: -
    tier                     the topic is not remote-enabled: nothing copied
    remote.storage.enable=true, local.retention.bytes=1000
    tier                     local: [10-19][20-24]*        remote: [0-9][10-19]
    consume from 0           0..24 with both clients
"""

from __future__ import annotations

from tests.scenarios.tiered import TieredStage, read_with_both_clients, topic_configs

TOPIC = "enabled-later"


def test_enabling_remote_storage_on_a_topic_with_data(stage: TieredStage) -> None:
    topic_id = stage.create_topic(TOPIC, topic_configs())
    stage.produce(TOPIC, 25)
    before = "local: [0-9][10-19][20-24]* remote: - | earliest=0 local=0 tiered=-1 end=25"
    stage.expect(TOPIC, topic_id, before)
    untouched = stage.tier(TOPIC)
    assert untouched[0].startswith("summary action=copy partitions=0 segments=0")
    stage.expect(TOPIC, topic_id, before)

    stage.alter_topic(TOPIC, remote_storage_enable="true", local_retention_bytes="1000")
    copied = stage.tier(TOPIC)
    assert copied[0].startswith(
        f"partition={TOPIC}-0 action=copy status=ok segments=2 bytes=1560 offsets=0..19"
    )
    stage.expect(
        TOPIC,
        topic_id,
        "local: [10-19][20-24]* remote: [0-9][10-19] | earliest=0 local=10 tiered=19 end=25",
    )
    assert read_with_both_clients(stage.bootstrap, TOPIC, start=0) == list(range(25))
