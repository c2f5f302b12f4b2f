"""__remote_log_metadata on a broker process: client-mode RLMMs publish and read their own
writes, a second instance sees the same cache, ``remote-log-metadata dump`` prints the events
(KIP-405 "Internal message format"), and a broker restart keeps them."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage_core.client import KafkaAdminClient, KafkaCluster
from storage_core.common import TopicIdPartition, TopicPartition
from storage_core.tiered.metadata import RemoteLogSegmentState
from storage_core.tiered.topic_based_rlmm import (
    COMMITTED_OFFSETS_FILE_NAME,
    REMOTE_LOG_METADATA_TOPIC_NAME,
    ConsumerTaskConfig,
    TopicBasedRemoteLogMetadataManager,
)
from tests.broker_process import BrokerProcess
from tests.remote_log_metadata_events import copy_started, state_update

S = RemoteLogSegmentState
FAST = ConsumerTaskConfig(idle_poll_ms=20)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(
        tmp_path,
        overrides={
            "remote.log.storage.system.enable": "true",
            "remote.log.metadata.topic.num.partitions": "5",
        },
    ) as process:
        yield process


def create_tiered_topic(bootstrap: str) -> TopicIdPartition:
    with KafkaCluster(bootstrap) as cluster:
        created = KafkaAdminClient(cluster).create_topic(
            "orders",
            num_partitions=2,
            replication_factor=1,
            configs={"remote.storage.enable": "true"},
        )
    assert created.topic_id is not None
    return TopicIdPartition(created.topic_id, TopicPartition("orders", 1))


def dump(bootstrap: str, *args: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-m", "storage_core.cli", "remote-log-metadata", "dump",
         "--bootstrap-server", bootstrap, "--from-beginning", "--timeout-ms", "500", *args],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert result.stderr.strip().endswith("messages")
    return result.stdout.splitlines()


def test_metadata_topic_is_internal_with_the_configured_partitions(broker: BrokerProcess) -> None:
    with KafkaCluster(broker.bootstrap) as cluster:
        topic = cluster.refresh_metadata([REMOTE_LOG_METADATA_TOPIC_NAME]).topic(
            REMOTE_LOG_METADATA_TOPIC_NAME
        )
        assert topic is not None and topic.is_internal and len(topic.partitions) == 5
        admin = KafkaAdminClient(cluster)
        assert REMOTE_LOG_METADATA_TOPIC_NAME not in admin.list_topics()
        assert REMOTE_LOG_METADATA_TOPIC_NAME in admin.list_topics(include_internal=True)
        (description,) = admin.describe_topics([REMOTE_LOG_METADATA_TOPIC_NAME])
        configs = {entry.name: entry.value for entry in description.configs}
        assert configs["retention.ms"] == "-1"
        assert configs["cleanup.policy"] == "delete"


def test_client_mode_reads_its_writes_and_survives_a_broker_restart(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    tip = create_tiered_topic(broker.bootstrap)
    segment = copy_started(tip, 0, 99, {0: 0, 3: 60})
    finished = state_update(segment, S.COPY_SEGMENT_FINISHED)
    with TopicBasedRemoteLogMetadataManager.for_client(
        broker.bootstrap, consume_wait_ms=10_000, consumer_config=FAST
    ) as writer:
        writer.add_remote_log_segment_metadata(segment)
        assert [s.state for s in writer.list_remote_log_segments(tip)] == [S.COPY_SEGMENT_STARTED]
        writer.update_remote_log_segment_metadata(finished)
        assert writer.remote_log_segment_metadata(tip, 3, 70) == segment.create_with_updates(
            finished
        )
        assert writer.is_ready(tip)

    snapshot_dir = tmp_path / "job-state"
    with TopicBasedRemoteLogMetadataManager.for_client(
        broker.bootstrap, snapshot_dir=snapshot_dir, consume_wait_ms=10_000, consumer_config=FAST
    ) as reader:
        assert reader.highest_offset_for_epoch(tip, 3) == 99
        assert list(reader.list_remote_log_segments(tip)) == [segment.create_with_updates(finished)]
    assert (snapshot_dir / COMMITTED_OFFSETS_FILE_NAME).is_file()

    metadata_partition = writer.partitioner.metadata_partition(tip)
    lines = dump(
        broker.bootstrap,
        "--property", "print.partition=true",
        "--property", "print.message.offset=true",
        "--property", "print.version=true",
    )  # fmt: skip
    segment_id = (
        f"{{id:{segment.remote_log_segment_id.id},topicId:{tip.topic_id},"
        f"topicName:orders,partition:1}}"
    )
    assert lines == [
        f"partition:{metadata_partition},message-offset:0,type:RemoteLogSegmentMetadata,"
        f"version:0,event-value:{{remote-log-segment-id:{segment_id},start-offset:0,"
        "end-offset:99,leader-epoch:3,remote-log-segment-state:COPY_SEGMENT_STARTED}",
        f"partition:{metadata_partition},message-offset:1,type:RemoteLogSegmentMetadataUpdate,"
        f"version:0,event-value:{{remote-log-segment-id:{segment_id},leader-epoch:-1,"
        "remote-log-segment-state:COPY_SEGMENT_FINISHED}",
    ]
    (short,) = dump(broker.bootstrap, "--max-messages", "1", "--partition", str(metadata_partition))
    assert short.startswith("type:RemoteLogSegmentMetadata,event-value:{remote-log-segment-id:")
    (everything,) = dump(
        broker.bootstrap, "--max-messages", "1", "--property", "print.all.event.value.fields=true"
    )
    assert "segment-leader-epochs:{0:0,3:60}" in everything
    assert "segment-size-in-bytes:10000" in everything

    broker.restart()
    assert (broker.log_dir / "orders-1" / "remote_log_snapshot").is_file()
    assert (broker.log_dir / COMMITTED_OFFSETS_FILE_NAME).is_file()
    with TopicBasedRemoteLogMetadataManager.for_client(
        broker.bootstrap, consume_wait_ms=10_000, consumer_config=FAST
    ) as fresh:  # no snapshot: everything comes from the topic, which the broker kept
        assert list(fresh.list_remote_log_segments(tip)) == [segment.create_with_updates(finished)]
        assert fresh.consumer.records_read == 2
    with TopicBasedRemoteLogMetadataManager.for_client(
        broker.bootstrap, snapshot_dir=snapshot_dir, consume_wait_ms=10_000, consumer_config=FAST
    ) as after_restart:
        assert after_restart.highest_offset_for_epoch(tip, 3) == 99
        assert after_restart.consumer.records_read == 0  # restored from its snapshot
        deleting = state_update(segment, S.DELETE_SEGMENT_STARTED)
        after_restart.update_remote_log_segment_metadata(deleting)
        assert after_restart.remote_log_segment_metadata(tip, 3, 70) is None
        assert [s.state for s in after_restart.list_remote_log_segments(tip)] == [
            S.DELETE_SEGMENT_STARTED
        ]
    assert len(dump(broker.bootstrap)) == 3
