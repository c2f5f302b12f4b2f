"""restore_topic on a broker's chunked, encrypted tier (``tests/chunked_broker_support``): the
topic restored under another name, from the bucket's manifests alone, while the source lives.

    source: records 0..299, segs 0..k copied       topic_manifests writes its manifest;
    groups: "readers" at 100, "ahead" at 299        backup_consumer_offsets backs them up
    restore_topic --target restored                 a new topic id, the segments' objects
                                                    copied under it, its metadata published
    consume restored from offset 0                  every record of 0..E (E = seg k's end),
                                                    read from the remote tier, byte for byte
    produce to restored                             the record lands at E + 1
    configs                                         the source's, no restore marker left
    --restore-offsets                               "readers" at 100 in restored (a consumer
                                                    of the group resumes there), "ahead"
                                                    clamped to E + 1 (the bucket ends at E)
    again                                           the target exists: refused by name
    a restore cut short (created, half published)   the next run finishes it

The source's objects are never written: their bytes and times are the same after.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition

from jobs import backup_consumer_offsets, restore_topic, topic_manifests
from storage_core.client import KafkaAdminClient, KafkaCluster
from storage_core.client.consumer import KafkaConsumer as StorageConsumer
from storage_core.common import TopicIdPartition, TopicPartition
from storage_core.errors import StorageError
from storage_core.protocol.config_resource import ConfigResourceType
from storage_core.tiered.recovery.bucket_inventory import bucket_store, scan_bucket
from storage_core.tiered.recovery.restore import restore_segment
from storage_core.tiered.recovery.restore_plan import plan_partition
from tests.chunked_broker_support import TOPIC, ChunkedTier, chunked_tier, value_of
from tests.remote_log_metadata_events import copy_started
from tests.tiered_broker_support import client_rlmm

pytestmark = pytest.mark.timeout(240)


def job(tier: ChunkedTier, module: object, *extra: str) -> int:
    main = module.main  # type: ignore[attr-defined]
    argv = [
        "--bootstrap-server", tier.broker.bootstrap,
        "--broker-config", str(tier.broker.config_path),
        *extra,
    ]  # fmt: skip
    return int(main(argv))


def read_all(bootstrap: str, topic: str, end: int) -> list[tuple[int, bytes]]:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=20_000
    )
    try:
        tp = KafkaTopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        records = []
        for record in consumer:
            records.append((record.offset, record.value))
            if record.offset + 1 >= end:
                break
        return records
    finally:
        consumer.close()


def commit(bootstrap: str, group: str, topic: str, offset: int) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        consumer.commit(offsets=[ConfluentTopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        consumer.close()


def committed(bootstrap: str, group: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        (answer,) = consumer.committed([ConfluentTopicPartition(topic, 0)], timeout=20)
        return int(answer.offset)
    finally:
        consumer.close()


def source_objects(tier: ChunkedTier) -> dict[Path, tuple[int, int]]:
    return {
        path: (path.stat().st_size, path.stat().st_mtime_ns)
        for path in tier.remote_dir.rglob("*")
        if path.is_file() and str(tier.topic_id_partition.topic_id) in str(path)
    }


def test_a_topic_restored_from_the_bucket_reads_back_whole_and_takes_new_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with chunked_tier(tmp_path / "tier") as tier:
        bootstrap = tier.broker.bootstrap
        end = tier.copied[-1].end_offset
        assert job(tier, topic_manifests) == 0
        commit(bootstrap, "readers", TOPIC, 100)
        commit(bootstrap, "ahead", TOPIC, 299)
        assert job(tier, backup_consumer_offsets) == 0
        before = source_objects(tier)
        summary_path = tmp_path / "restore.json"
        code = job(
            tier, restore_topic, "--topic", TOPIC, "--target", "restored", "--restore-offsets",
            "--summary-path", str(summary_path),
        )  # fmt: skip
        out = capsys.readouterr().out
        assert code == 0, out
        summary = json.loads(summary_path.read_text())
        assert summary["counts"]["segments_restored"] == len(tier.copied)
        assert summary["counts"]["partitions_restored"] == 1
        assert summary["counts"]["groups_restored"] == 2
        assert summary["counts"]["offsets_clamped"] == 1
        assert "group=ahead partition=restored-0" in out and f"offset={end + 1}" in out
        assert committed(bootstrap, "readers", "restored") == 100
        assert committed(bootstrap, "ahead", "restored") == end + 1
        resumed = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "readers", "enable.auto.commit": False}
        )
        resumed.subscribe(["restored"])
        first = resumed.poll(30)
        resumed.close()
        assert first is not None and first.error() is None
        assert (first.offset(), first.value()) == (100, value_of(100))
        assert source_objects(tier) == before

        restored = read_all(bootstrap, "restored", end + 1)
        assert [offset for offset, _ in restored] == list(range(end + 1))
        assert [value for _, value in restored] == [value_of(i) for i in range(end + 1)]

        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
        metadata = producer.send("restored", value=b"after-the-restore", partition=0).get(10)
        producer.close()
        assert metadata.offset == end + 1

        with KafkaCluster(bootstrap) as cluster:
            admin = KafkaAdminClient(cluster)
            configs = {
                e.name: e.value
                for e in admin.describe_configs(ConfigResourceType.TOPIC, "restored")
            }
            target_id = cluster.refresh_metadata(["restored"]).topic("restored").topic_id
        assert configs["segment.bytes"] == "8192"
        assert configs["remote.storage.enable"] == "true"
        assert configs["remote.log.restore.leader.epoch"] == "-1"
        assert configs["remote.log.restore.enable"] == "false"
        assert target_id not in (None, tier.topic_id_partition.topic_id)

        code = job(tier, restore_topic, "--topic", TOPIC, "--target", "restored")
        assert code == 2
        assert "the target topic 'restored' exists" in capsys.readouterr().err


def test_a_restore_cut_short_is_finished_by_the_next_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with chunked_tier(tmp_path / "tier") as tier:
        bootstrap = tier.broker.bootstrap
        end = tier.copied[-1].end_offset
        assert job(tier, topic_manifests) == 0
        # What a run killed after creating the target and publishing one segment leaves.
        with KafkaCluster(bootstrap) as cluster:
            created = KafkaAdminClient(cluster).create_topic(
                "resumed",
                num_partitions=1,
                replication_factor=1,
                configs={
                    "remote.storage.enable": "true",
                    "segment.bytes": "8192",
                    "remote.log.restore.leader.epoch": "0",
                },
            )
        assert created.topic_id is not None
        rsm = restore_topic.load_remote_storage_manager("LocalTieredStorage", tier.rsm_config)
        store = bucket_store(rsm)
        inventory = scan_bucket(store, topic=TOPIC)
        plan = plan_partition(inventory.partitions[tier.topic_id_partition], allow_gaps=False)
        target = TopicIdPartition(created.topic_id, TopicPartition("resumed", 0))
        with client_rlmm(bootstrap) as rlmm:
            restore_segment(store, rlmm, plan.segments[0], target, known={}, now_ms=1)
        store.close()
        # offline until the restore has published every segment (not hosted: Kafka's
        # getPartitionOrError answer, NOT_LEADER_OR_FOLLOWER)
        with (
            KafkaCluster(bootstrap) as cluster,
            pytest.raises(StorageError, match=r"NOT_LEADER_OR_FOLLOWER"),
        ):
            StorageConsumer(cluster).latest_offset("resumed", 0)

        code = job(tier, restore_topic, "--topic", TOPIC, "--target", "resumed")
        out = capsys.readouterr().out
        assert code == 0, out
        assert "resumed=true" in out
        restored = read_all(bootstrap, "resumed", end + 1)
        assert [value for _, value in restored] == [value_of(i) for i in range(end + 1)]


def test_a_restore_under_way_is_resumed_only_by_the_same_restore(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A target marked as under restore that holds segments this run would not restore (begun
    from another source, or with other options) is refused, naming the partition."""
    with chunked_tier(tmp_path / "tier") as tier:
        bootstrap = tier.broker.bootstrap
        assert job(tier, topic_manifests) == 0
        with KafkaCluster(bootstrap) as cluster:
            created = KafkaAdminClient(cluster).create_topic(
                "elsewhere",
                num_partitions=1,
                replication_factor=1,
                configs={"remote.storage.enable": "true", "remote.log.restore.leader.epoch": "0"},
            )
        assert created.topic_id is not None
        target = TopicIdPartition(created.topic_id, TopicPartition("elsewhere", 0))
        with client_rlmm(bootstrap) as rlmm:
            rlmm.add_remote_log_segment_metadata(copy_started(target, 0, 9))
        code = job(tier, restore_topic, "--topic", TOPIC, "--target", "elsewhere")
        assert code == 2
        err = capsys.readouterr().err
        assert "elsewhere-0 is under restore from other segments than this run's" in err
