"""restore_topic under faults and bad input, on three brokers with a chunked local tier
(``tests/integration/restore_cluster_support``) and on moto's S3 (one broker).

    faults: 3 partitions, RF 3, tiered; topic_manifests
    restore SIGKILLed after the target exists      the next run resumes it: every segment
    and some segments are published                once in the target's metadata and the
                                                   store, every record back
    unknown topic / a target that exists           refused by name, nothing created
    a segment manifest of a newer format version,  the partition is stopped with the damaged
    checksums that disagree (--verify-checksums),  segment named, nothing created; never
    objects missing under a manifest               a shorter log restored without a word
    two restores of one target at once             the second is refused, the first finishes
    S3 stopped mid-restore (SIGSTOP)               the run fails naming the store, the
                                                   source's objects are as they were; run
                                                   again once the store is back: restored
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from embedded.zookeeper import ZooKeeperEnsemble
from jobs import restore_topic, topic_manifests
from storage_core.client import KafkaAdminClient, KafkaCluster
from storage_core.common import TopicIdPartition, TopicPartition, Uuid
from storage_core.protocol.config_resource import ConfigResourceType
from storage_core.tiered.metadata.metadata import RemoteLogSegmentMetadata
from storage_core.tiered.metadata.states import RemoteLogSegmentState
from storage_core.tiered.remote_object_keys import (
    InvalidRemoteObjectKeyError,
    RemoteObjectSuffix,
    parse_object_key,
    segment_key,
    topic_manifest_key,
)
from storage_core.tiered.remote_storage_manager import RemoteSegmentRef
from tests import cluster_support
from tests.broker_process import BrokerProcess
from tests.integration.jobs.tiered_cluster import BROKER_SETTINGS, TieredCluster
from tests.integration.restore_cluster_support import (
    ASSIGNMENT,
    TieredBrokers,
    read,
    remote_segments,
    seed_topic,
    tiered_brokers,
)
from tests.s3_server import AWS_TEST_ENV, BUCKET, S3Server
from tests.tiered_broker_support import client_rlmm

cluster_support.require_java()
pytestmark = pytest.mark.timeout(300)

SOURCE = "faults"
SLOW_LOCAL = "tests.integration.restore_slow_storage.SlowRestoreLocalTieredStorage"
SLOW_S3 = "tests.integration.restore_slow_storage.SlowRestoreS3Storage"

Seeded = tuple[TieredBrokers, Uuid, dict[int, int]]


@pytest.fixture(scope="module")
def seeded(
    zookeeper: ZooKeeperEnsemble, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Seeded]:
    with tiered_brokers(zookeeper, tmp_path_factory.mktemp("restore-faults")) as brokers:
        source_id, ends = seed_topic(brokers, SOURCE)
        code, summary = brokers.job(topic_manifests)
        assert code == 0, summary
        yield brokers, source_id, ends


def slow_restore(brokers: TieredBrokers, target: str, sleep_ms: int) -> subprocess.Popen[str]:
    """``python -m jobs.restore_topic`` through a store that sleeps before each segment."""
    command = [
        sys.executable, "-m", "jobs.restore_topic",
        "--bootstrap-server", brokers.bootstrap,
        "--remote-storage-manager", SLOW_LOCAL,
        "--rsm-config", f"local.storage.dir={brokers.remote_dir}",
        "--rsm-config", f"slow.restore.sleep.ms={sleep_ms}",
        "--lock-dir", str(brokers.directory / "locks"),
        "--topic", SOURCE, "--target", target, "--wait-s", "60",
    ]  # fmt: skip
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=Path.cwd()
    )


def topic_id(bootstrap: str, topic: str) -> Uuid | None:
    with KafkaCluster(bootstrap) as client:
        found = client.refresh_metadata([topic]).topic(topic)
    return None if found is None or found.error != 0 else found.topic_id


def finished(rlmm: Any, target_id: Uuid, target: str) -> int:
    return sum(
        1
        for p in range(len(ASSIGNMENT))
        for m in rlmm.list_remote_log_segments(
            TopicIdPartition(target_id, TopicPartition(target, p))
        )
        if m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED
    )


def wait_until_restoring(brokers: TieredBrokers, target: str, segments: int) -> Uuid:
    """Until the target exists and ``segments`` of its segments are published."""
    target_id = cluster_support.eventually(
        lambda: topic_id(brokers.bootstrap, target), what=f"{target} to be created"
    )
    with client_rlmm(brokers.bootstrap) as rlmm:
        cluster_support.eventually(
            lambda: finished(rlmm, target_id, target) >= segments,
            what=f"{segments} segments of {target} published",
            poll_s=0.05,
        )
    return target_id


def object_path(
    brokers: TieredBrokers, metadata: RemoteLogSegmentMetadata, suffix: RemoteObjectSuffix
) -> Path:
    return brokers.remote_dir / segment_key("", RemoteSegmentRef.of(metadata), suffix)


def stored_segment_ids(remote_dir: Path, target_id: Uuid) -> set[Uuid]:
    """The segments with a manifest under the target's topic id in the local store."""
    found = set()
    for path in remote_dir.rglob("*"):
        if not path.is_file():
            continue
        try:
            parsed = parse_object_key(str(path.relative_to(remote_dir)), "")
        except InvalidRemoteObjectKeyError:
            continue  # a topic manifest, an offsets backup
        segment = parsed.segment
        if (
            segment.topic_id_partition.topic_id == target_id
            and parsed.suffix is RemoteObjectSuffix.SEGMENT_MANIFEST
        ):
            found.add(segment.segment_id)
    return found


def test_a_restore_killed_mid_run_is_finished_by_the_next_run(seeded: Seeded) -> None:
    brokers, source_id, ends = seeded
    target = "faults-killed"
    source = remote_segments(brokers.bootstrap, source_id, SOURCE)
    total = sum(len(found) for found in source.values())
    process = slow_restore(brokers, target, sleep_ms=300)
    try:
        target_id = wait_until_restoring(brokers, target, 2)
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.kill()
        process.communicate()
    assert process.returncode == -signal.SIGKILL
    with client_rlmm(brokers.bootstrap) as rlmm:
        published = finished(rlmm, target_id, target)
    assert 2 <= published < total

    code, summary = brokers.job(restore_topic, "--topic", SOURCE, "--target", target)
    assert code == 0, summary
    counts = summary["counts"]
    assert counts["segments_already_restored"] >= published
    assert counts["segments_already_restored"] + counts["segments_restored"] == total
    assert counts["partitions_restored"] == 3
    assert topic_id(brokers.bootstrap, target) == target_id
    restored = remote_segments(brokers.bootstrap, target_id, target)
    for partition, found in restored.items():
        ids = [m.remote_log_segment_id.id for m in found]
        assert len(ids) == len(set(ids)) == len(source[partition])
        assert all(m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED for m in found)
        assert sorted((m.start_offset, m.end_offset) for m in found) == sorted(
            (m.start_offset, m.end_offset) for m in source[partition]
        )
    assert stored_segment_ids(brokers.remote_dir, target_id) == {
        m.remote_log_segment_id.id for found in restored.values() for m in found
    }
    for partition, end in ends.items():
        assert read(brokers.bootstrap, target, partition, 0, end) == read(
            brokers.bootstrap, SOURCE, partition, 0, end
        )


def test_an_unknown_topic_and_an_existing_target_are_refused_by_name(
    seeded: Seeded, capsys: pytest.CaptureFixture[str]
) -> None:
    brokers, _, _ = seeded
    code, _ = brokers.job(restore_topic, "--topic", "no-such-topic")
    assert code == 2
    assert "the bucket holds no segment of topic 'no-such-topic'" in capsys.readouterr().err
    assert topic_id(brokers.bootstrap, "no-such-topic") is None

    code, _ = brokers.job(restore_topic, "--topic", SOURCE)
    assert code == 2
    assert f"the target topic {SOURCE!r} exists on the cluster" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("damage", "partition", "which", "reason"),
    [
        ("newer-version", 0, -1, "format version 4 is not one this broker reads"),
        ("checksum", 1, 0, "fails its checksum"),
        ("missing-object", 2, -1, "which is missing"),
    ],
)
def test_a_damaged_segment_stops_its_partition_and_nothing_is_created(
    seeded: Seeded,
    capsys: pytest.CaptureFixture[str],
    damage: str,
    partition: int,
    which: int,
    reason: str,
) -> None:
    brokers, source_id, _ = seeded
    target = f"faults-{damage}"
    segments = sorted(
        remote_segments(brokers.bootstrap, source_id, SOURCE)[partition],
        key=lambda m: m.start_offset,
    )
    segment = segments[which]
    manifest = object_path(brokers, segment, RemoteObjectSuffix.SEGMENT_MANIFEST)
    log = object_path(brokers, segment, RemoteObjectSuffix.LOG)
    index = object_path(brokers, segment, RemoteObjectSuffix.OFFSET_INDEX)
    saved = {path: path.read_bytes() for path in (manifest, log, index)}
    try:
        if damage == "newer-version":
            text = manifest.read_bytes()
            assert b'"version":3' in text
            manifest.write_bytes(text.replace(b'"version":3', b'"version":4', 1))
        elif damage == "checksum":
            data = bytearray(log.read_bytes())
            data[len(data) // 2] ^= 0xFF
            log.write_bytes(bytes(data))
        else:
            index.unlink()
        code, summary = brokers.job(
            restore_topic, "--topic", SOURCE, "--target", target, "--verify-checksums"
        )
        out, err = capsys.readouterr()
    finally:
        for path, data in saved.items():
            path.write_bytes(data)
    assert code == 1, (out, err)
    assert summary["counts"]["partitions_stopped"] == 1, summary
    stopped = [line for line in out.splitlines() if line.startswith("stopped ")]
    assert len(stopped) == 1 and f"partition={SOURCE}-{partition}" in stopped[0], out
    assert reason in stopped[0] and str(segment.remote_log_segment_id.id) in stopped[0], stopped
    assert "cannot be restored" in err
    assert topic_id(brokers.bootstrap, target) is None


def test_a_second_restore_of_the_same_target_is_refused_while_the_first_runs(
    seeded: Seeded, capsys: pytest.CaptureFixture[str]
) -> None:
    brokers, _, _ = seeded
    target = "faults-locked"
    process = slow_restore(brokers, target, sleep_ms=200)
    try:
        wait_until_restoring(brokers, target, 1)
        code, summary = brokers.job(restore_topic, "--topic", SOURCE, "--target", target)
        err = capsys.readouterr().err
        out, first_err = process.communicate(timeout=120)
    finally:
        process.kill()
    assert code == 1, summary
    assert f"another restore of {target} is running" in err
    assert process.returncode == 0, (out, first_err)
    assert "partitions_restored=3" in out


# -- S3 -------------------------------------------------------------------------------------


@pytest.fixture
def s3_tier(s3: S3Server, tmp_path: Path) -> Iterator[TieredCluster]:
    settings = {
        "remote.log.storage.manager.class.name": "S3RemoteStorageManager",
        "rsm.config.s3.bucket.name": BUCKET,
        "rsm.config.s3.key.prefix": "restore",
        "rsm.config.s3.endpoint.url": s3.endpoint_url,
        "rsm.config.s3.path.style.access.enabled": "true",
        "rsm.config.s3.region": AWS_TEST_ENV["AWS_DEFAULT_REGION"],
    }
    with BrokerProcess(tmp_path / "broker", overrides={**BROKER_SETTINGS, **settings}) as broker:
        yield TieredCluster(broker, settings)


def bucket_objects(s3: S3Server) -> dict[str, tuple[int, str]]:
    client = s3.client()
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
    return {o["Key"]: (o["Size"], o["ETag"]) for page in pages for o in page.get("Contents", [])}


def test_the_store_stopped_mid_restore_fails_the_run_naming_it_and_a_rerun_finishes(
    s3: S3Server, s3_tier: TieredCluster, tmp_path: Path
) -> None:
    (tip,) = s3_tier.create_topic("on-s3")
    s3_tier.produce("on-s3", 120)
    copied = s3_tier.copy(tip)
    assert len(copied) >= 3, copied
    assert topic_manifests.main(s3_tier.job_args()) == 0
    before = bucket_objects(s3)
    store_args = [
        f"--rsm-config=s3.{name}={value}"
        for name, value in {
            "bucket.name": BUCKET, "key.prefix": "restore", "endpoint.url": s3.endpoint_url,
            "path.style.access.enabled": "true", "region": AWS_TEST_ENV["AWS_DEFAULT_REGION"],
            "read.timeout.ms": "300", "retry.max.attempts": "2", "retry.backoff.ms": "20",
        }.items()
    ]  # fmt: skip
    command = [
        sys.executable, "-m", "jobs.restore_topic", "--bootstrap-server", s3_tier.bootstrap,
        "--remote-storage-manager", SLOW_S3, *store_args, "--rsm-config=slow.restore.sleep.ms=500",
        "--topic", "on-s3", "--target", "on-s3-restored", "--wait-s", "30",
        "--summary-path", str(tmp_path / "stopped.json"),
    ]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert s3.process is not None
    try:
        with client_rlmm(s3_tier.bootstrap) as rlmm:
            target_id = cluster_support.eventually(
                lambda: topic_id(s3_tier.bootstrap, "on-s3-restored"), what="the target"
            )
            target = TopicIdPartition(target_id, TopicPartition("on-s3-restored", 0))
            cluster_support.eventually(
                lambda: any(
                    m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED
                    for m in rlmm.list_remote_log_segments(target)
                ),
                what="a segment of the target published",
                poll_s=0.05,
            )
        os.kill(s3.process.pid, signal.SIGSTOP)
        try:
            out, err = process.communicate(timeout=60)
        finally:
            os.kill(s3.process.pid, signal.SIGCONT)
    finally:
        process.kill()
    assert process.returncode == 1, (out, err)
    (error,) = [line for line in err.splitlines() if line.startswith("restore_topic: error:")]
    assert s3.endpoint_url in error and "is the object store reachable?" in error, error
    assert "on-s3-restored stays marked as under restore" in error, error
    assert "run the restore again to finish it" in error, error
    with KafkaCluster(s3_tier.bootstrap) as client:
        entries = KafkaAdminClient(client).describe_configs(
            ConfigResourceType.TOPIC, "on-s3-restored", ["remote.log.restore.leader.epoch"]
        )
    assert [int(e.value or -1) for e in entries] == [0]  # the half-made target is marked
    after = bucket_objects(s3)
    assert {k: v for k, v in after.items() if k in before} == before  # the source untouched

    rerun = [arg for arg in command if arg != "--rsm-config=slow.restore.sleep.ms=500"]
    rerun[rerun.index(SLOW_S3)] = "S3RemoteStorageManager"
    rerun[rerun.index(str(tmp_path / "stopped.json"))] = str(tmp_path / "rerun.json")
    finished_run = subprocess.run(rerun, check=False, capture_output=True, text=True, timeout=120)
    assert finished_run.returncode == 0, (finished_run.stdout, finished_run.stderr)
    assert "resumed=true" in finished_run.stdout
    end = copied[-1].end_offset
    assert read(s3_tier.bootstrap, "on-s3-restored", 0, 0, end) == read(
        s3_tier.bootstrap, "on-s3", 0, 0, end
    )
    assert {k: v for k, v in bucket_objects(s3).items() if k in before} == before


def test_a_topic_manifest_of_a_newer_format_version_is_refused_by_name(
    seeded: Seeded, capsys: pytest.CaptureFixture[str]
) -> None:
    brokers, source_id, _ = seeded
    path = brokers.remote_dir / topic_manifest_key("", SOURCE, source_id)
    saved = path.read_bytes()
    document = json.loads(saved)
    document["version"] += 1
    path.write_text(json.dumps(document))
    try:
        code, _ = brokers.job(restore_topic, "--topic", SOURCE, "--target", "faults-manifest")
        err = capsys.readouterr().err
    finally:
        path.write_bytes(saved)
    assert code == 1
    (error,) = [line for line in err.splitlines() if line.startswith("restore_topic: error:")]
    assert topic_manifest_key("", SOURCE, source_id) in error and "version" in error, error
    assert topic_id(brokers.bootstrap, "faults-manifest") is None
