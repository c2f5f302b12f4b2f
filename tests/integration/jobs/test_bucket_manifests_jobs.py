"""``jobs.topic_manifests`` and ``jobs.backup_consumer_offsets`` against a broker process, on
the local store and on S3 (moto): the bucket says which topic each directory holds and where
the consumer groups were; reconcile keeps both kinds of object.

    topic "manifested" (remote, 2 partitions): 150 records to p0 (copied), 20 to p1 (not);
    topic "local-only" (remote.storage.enable=false)
    topic_manifests                 one manifest: the topic's id, its own configs, p0's
                                    remote offsets as the RLMM holds them, p1 none;
                                    "local-only" has none
    group "billing" commits p0=100 (with metadata), p1=20; group "elsewhere" commits
      only on "local-only"
    backup_consumer_offsets x3 --keep 2   the newest two backups left, each with billing's
                                    offsets and the high watermarks 150 and 20; "elsewhere"
                                    absent; a stray key under _consumer-offsets/ untouched
    reconcile                       counts 1 topic manifest and 2 offset backups, keeps them
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import boto3
import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
)
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.structs import OffsetAndMetadata

from jobs import backup_consumer_offsets, reconcile, topic_manifests
from storage_core.client import KafkaAdminClient, KafkaCluster
from storage_core.common import TopicIdPartition
from storage_core.tiered.metadata.states import RemoteLogSegmentState
from storage_core.tiered.recovery.offsets_backup import OffsetsBackup
from storage_core.tiered.recovery.topic_manifest import TopicManifest
from storage_core.tiered.remote_object_keys import (
    InvalidRemoteObjectKeyError,
    offsets_backups_prefix,
    parse_offsets_backup_key,
    topic_manifest_key,
)
from storage_core.tiered.remote_storage_manager import (
    RemoteObjectStore,
    RemoteResourceNotFoundError,
    remote_object_store,
)
from tests.broker_process import BrokerProcess
from tests.integration.jobs.tiered_cluster import (
    BROKER_SETTINGS,
    SEGMENT_BYTES,
    TieredCluster,
    local_store_settings,
)
from tests.s3_server import AWS_TEST_ENV, BUCKET, S3Server

pytestmark = pytest.mark.timeout(300)

TOPIC = "manifested"
LOCAL_ONLY = "local-only"
PREFIX = "cluster-m"


@pytest.fixture(params=["local", "s3"])
def cluster(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[TieredCluster]:
    if request.param == "local":
        settings = {
            **local_store_settings(tmp_path / "remote"),
            "rsm.config.local.key.prefix": PREFIX,
        }
        with BrokerProcess(tmp_path / "broker", overrides={**BROKER_SETTINGS, **settings}) as b:
            yield TieredCluster(b, settings)
        return
    s3: S3Server = request.getfixturevalue("s3")
    settings = {
        "remote.log.storage.manager.class.name": "S3RemoteStorageManager",
        "rsm.config.s3.bucket.name": BUCKET,
        "rsm.config.s3.key.prefix": PREFIX,
        "rsm.config.s3.endpoint.url": s3.endpoint_url,
        "rsm.config.s3.path.style.access.enabled": "true",
        "rsm.config.s3.region": AWS_TEST_ENV["AWS_DEFAULT_REGION"],
    }
    with BrokerProcess(tmp_path / "broker", overrides={**BROKER_SETTINGS, **settings}) as b:
        yield TieredCluster(b, settings)


def run(module: object, cluster: TieredCluster, summary: Path, *extra: str) -> tuple[int, dict]:
    code = module.main(cluster.job_args("--summary-path", str(summary), *extra))  # type: ignore[attr-defined]
    return code, json.loads(summary.read_text())


def store_of(cluster: TieredCluster) -> RemoteObjectStore:
    return remote_object_store(cluster.rsm(), "the test")


def commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], tuple[int, str]]) -> None:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        consumer.assign([KafkaTopicPartition(t, p) for t, p in offsets])
        consumer.commit(
            {
                KafkaTopicPartition(t, p): OffsetAndMetadata(offset, metadata, -1)
                for (t, p), (offset, metadata) in offsets.items()
            }
        )
    finally:
        consumer.close()


def test_manifests_and_offsets_backups_describe_the_bucket(
    cluster: TieredCluster, tmp_path: Path
) -> None:
    tips = cluster.create_topic(TOPIC, partitions=2)
    with KafkaCluster(cluster.bootstrap) as client:
        KafkaAdminClient(client).create_topic(
            LOCAL_ONLY, num_partitions=1, replication_factor=1, configs={"retention.ms": "60000"}
        )
    cluster.produce(TOPIC, 150, partition=0)
    cluster.produce(TOPIC, 20, partition=1)
    cluster.produce(LOCAL_ONLY, 5)
    copied = cluster.copy(tips[0])
    assert len(copied) >= 3
    store = store_of(cluster)
    try:
        # -- topic manifests: the broker wrote one at creation, without figures
        key = topic_manifest_key(PREFIX, TOPIC, tips[0].topic_id)
        by_broker = eventually_manifest(store, key, lambda m: True)
        assert all(p.remote_segments == 0 for p in by_broker.partitions)
        code, summary = run(topic_manifests, cluster, tmp_path / "dry.json", "--dry-run")
        assert code == 0 and summary["counts"]["objects_written"] == 0, summary
        assert summary["counts"]["partitions"] == 2
        assert TopicManifest.from_bytes(store.get_object(key), where=key) == by_broker
        code, summary = run(topic_manifests, cluster, tmp_path / "manifests.json")
        assert code == 0, summary
        assert summary["counts"]["topics"] == 1
        assert summary["counts"]["partitions"] == 2
        assert summary["counts"]["objects_written"] == 1
        key = topic_manifest_key(PREFIX, TOPIC, tips[0].topic_id)
        manifest = TopicManifest.from_bytes(store.get_object(key), where=key)
        with pytest.raises(InvalidRemoteObjectKeyError, match="neither a topic manifest"):
            store.put_object(copied_key(cluster, tips[0]), b"not a segment")
        assert manifest.topic == TOPIC and manifest.topic_id == tips[0].topic_id
        assert manifest.partition_count == 2 and manifest.replication_factor == 1
        assert manifest.configs == {
            "remote.storage.enable": "true",
            "segment.bytes": str(SEGMENT_BYTES),
        }
        finished = [
            s
            for s in cluster.segments(tips[0])
            if s.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED
        ]
        p0, p1 = manifest.partitions
        assert p0.remote_log_start_offset == min(s.start_offset for s in finished) == 0
        assert p0.remote_log_end_offset == max(s.end_offset for s in finished)
        assert p0.remote_segments == len(finished) == len(copied)
        assert p0.remote_bytes == sum(s.segment_size_in_bytes for s in finished)
        assert (p1.remote_log_start_offset, p1.remote_segments) == (None, 0)
        manifest_keys = [k for k in cluster.object_keys() if k.endswith("/topic-manifest.json")]
        assert manifest_keys == [key]  # none for the topic without remote storage

        # -- consumer offsets backups
        commit(cluster.bootstrap, "billing", {(TOPIC, 0): (100, "at-100"), (TOPIC, 1): (20, "")})
        commit(cluster.bootstrap, "elsewhere", {(LOCAL_ONLY, 0): (3, "")})
        stray = offsets_backups_prefix(PREFIX) + "README.json"
        write_stray(cluster, stray)
        code, summary = run(
            backup_consumer_offsets, cluster, tmp_path / "backup-dry.json", "--dry-run"
        )
        assert code == 0 and summary["counts"]["objects_written"] == 0, summary
        assert summary["counts"]["groups"] == 1
        assert [i.key for i in store.list_objects(offsets_backups_prefix(PREFIX))] == [stray]
        for run_number in range(3):
            code, summary = run(
                backup_consumer_offsets,
                cluster,
                tmp_path / f"backup-{run_number}.json",
                "--keep",
                "2",
            )
            assert code == 0, summary
            assert summary["counts"]["groups"] == 1
            assert summary["counts"]["topics"] == 1 and summary["counts"]["partitions"] == 2
            assert summary["counts"]["objects_written"] == 1
            assert summary["counts"]["objects_deleted"] == (1 if run_number == 2 else 0)
        listed = [i.key for i in store.list_objects(offsets_backups_prefix(PREFIX))]
        backups = sorted(k for k in listed if k != stray)
        assert len(backups) == 2 and stray in listed
        assert backups[-1] == summary["details"]["key"]
        for backup_key in backups:
            backup = OffsetsBackup.from_bytes(store.get_object(backup_key), where=backup_key)
            assert backup.taken_at_ms == parse_offsets_backup_key(backup_key, PREFIX).taken_at_ms
            ((topic,),) = [backup.topics]
            assert topic.topic == TOPIC and topic.topic_id == tips[0].topic_id
            assert dict(topic.high_watermarks) == {0: 150, 1: 20}
            ((group,),) = [backup.groups]
            assert group.group_id == "billing"
            committed = {
                (t.topic, p.partition): (p.committed_offset, p.metadata)
                for t in group.topics
                for p in t.partitions
            }
            assert committed == {(TOPIC, 0): (100, "at-100"), (TOPIC, 1): (20, "")}
        oldest = summary["details"]["deleted"][0]
        with pytest.raises(RemoteResourceNotFoundError):
            store.get_object(oldest)

        # -- reconcile keeps them
        code, summary = run(
            reconcile, cluster, tmp_path / "reconcile.json", "--orphan-grace-s", "0"
        )
        assert code == 0, summary
        assert summary["counts"]["topic_manifests"] == 1
        assert summary["counts"]["offset_backups"] == 2
        assert summary["counts"]["foreign_objects"] == 1  # the stray key
        assert TopicManifest.from_bytes(store.get_object(key), where=key) == manifest
        assert sorted(
            k for k in (i.key for i in store.list_objects(offsets_backups_prefix(PREFIX)))
        ) == sorted([*backups, stray])
    finally:
        store.close()  # type: ignore[attr-defined]


def test_the_broker_rewrites_the_manifest_when_the_topic_changes(
    cluster: TieredCluster, tmp_path: Path
) -> None:
    """A config change and added partitions reach the bucket's manifest within seconds, from
    the broker, keeping the figures of the job's last run; the job's next run refreshes them."""
    tips = cluster.create_topic(TOPIC, partitions=2)
    cluster.produce(TOPIC, 150, partition=0)
    copied = cluster.copy(tips[0])
    store = store_of(cluster)
    key = topic_manifest_key(PREFIX, TOPIC, tips[0].topic_id)
    try:
        code, summary = run(topic_manifests, cluster, tmp_path / "manifests.json")
        assert code == 0, summary
        by_job = TopicManifest.from_bytes(store.get_object(key), where=key)
        assert by_job.partitions[0].remote_segments == len(copied)

        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        resource = ConfigResource(
            ConfigResource.Type.TOPIC,
            TOPIC,
            incremental_configs=[
                ConfigEntry(
                    "retention.ms",
                    "3600000",
                    incremental_operation=AlterConfigOpType.SET,
                )
            ],
        )
        for future in admin.incremental_alter_configs([resource]).values():
            future.result(timeout=15)
        altered = eventually_manifest(
            store, key, lambda m: m.configs.get("retention.ms") == "3600000"
        )
        assert altered.partitions == by_job.partitions
        assert altered.written_at_ms >= by_job.written_at_ms

        for future in admin.create_partitions([NewPartitions(TOPIC, 3)]).values():
            future.result(timeout=15)
        grown = eventually_manifest(store, key, lambda m: m.partition_count == 3)
        assert grown.configs == altered.configs
        assert grown.partitions[:2] == by_job.partitions
        assert grown.partitions[2].remote_segments == 0
    finally:
        store.close()  # type: ignore[attr-defined]


def eventually_manifest(
    store: RemoteObjectStore, key: str, wanted: Callable[[TopicManifest], bool]
) -> TopicManifest:
    """The manifest at ``key`` once ``wanted`` holds of it (the broker's task runs every 200 ms)."""
    last: object = None
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            manifest = TopicManifest.from_bytes(store.get_object(key), where=key)
        except RemoteResourceNotFoundError as missing:
            last = missing
        else:
            if wanted(manifest):
                return manifest
            last = manifest
        time.sleep(0.1)
    raise AssertionError(f"the manifest {key} never became what was wanted: {last!r}")


def copied_key(cluster: TieredCluster, tip: TopicIdPartition) -> str:
    """The key of a copied segment's .log (which put_object must never overwrite)."""
    return next(k for k in cluster.object_keys(tip) if k.endswith(".log"))


def write_stray(cluster: TieredCluster, key: str) -> None:
    """An object under the backups' prefix that is not a backup (someone else's)."""
    settings = cluster.store_settings
    if settings["remote.log.storage.manager.class.name"] == "LocalTieredStorage":
        path = Path(settings["rsm.config.local.storage.dir"]) / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"notes")
        return
    boto3.client(
        "s3",
        endpoint_url=settings["rsm.config.s3.endpoint.url"],
        region_name=settings["rsm.config.s3.region"],
    ).put_object(Bucket=BUCKET, Key=key, Body=b"notes")


def test_no_remote_topic_writes_no_manifest_and_errors_name_the_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in AWS_TEST_ENV.items():
        monkeypatch.setenv(name, value)
    settings = local_store_settings(tmp_path / "remote")
    with BrokerProcess(tmp_path / "broker", overrides={**BROKER_SETTINGS, **settings}) as b:
        cluster = TieredCluster(b, settings)
        with KafkaCluster(cluster.bootstrap) as client:
            KafkaAdminClient(client).create_topic(
                LOCAL_ONLY, num_partitions=1, replication_factor=1
            )
        code, summary = run(topic_manifests, cluster, tmp_path / "none.json")
        assert code == 0, summary
        assert summary["counts"]["topics"] == summary["counts"]["objects_written"] == 0
        assert cluster.object_keys() == []

        code, summary = run(topic_manifests, cluster, tmp_path / "unknown.json", "--topic", "nope")
        assert code == 1
        assert summary["errors"][0]["error"].startswith("JobArgumentError: --topic 'nope'")
        code, summary = run(
            topic_manifests, cluster, tmp_path / "local.json", "--topic", LOCAL_ONLY
        )
        assert code == 1 and "remote.storage.enable=false" in summary["errors"][0]["error"]

        unreachable = "http://127.0.0.1:9"  # discard: nothing listens
        code = backup_consumer_offsets.main(
            [
                "--bootstrap-server",
                cluster.bootstrap,
                "--remote-storage-manager",
                "S3RemoteStorageManager",
                "--rsm-config",
                "s3.bucket.name=backups",
                "--rsm-config",
                f"s3.endpoint.url={unreachable}",
                "--rsm-config",
                "s3.retry.max.attempts=1",
                "--summary-path",
                str(tmp_path / "unreachable.json"),
            ]
        )
        summary = json.loads((tmp_path / "unreachable.json").read_text())
        assert code == 1 and summary["status"] == "failed"
        error = summary["errors"][0]["error"]
        assert unreachable in error and "Could not connect" in error, error
