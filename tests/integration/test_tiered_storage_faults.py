"""Tiered storage on a broker process when the object store fails (S3 served by moto).

The broker runs ``S3RemoteStorageManager`` against moto through a TCP relay
(``tests/tcp_relay.py``). An outage is the relay going away: refused (no listener, relayed
connections reset) or a blackhole (connections accepted, never answered: every request runs
into the read timeout). The moto server itself keeps running, because moto keeps objects in
memory only: restarting it would lose every copied segment, which is a different fault (data
loss in the store) from the one tested here (the store unreachable, then back with its data).

Outage story (``test_store_outage_...``)::

    600 records, copied; local retention   local: [j..k][active]  remote: seg 0..k (FINISHED)
    outage
      produce 200 more, fetch local data   each answered within 1 s while tiered reads fail
      fetch offset 0 (tiered)              KAFKA_STORAGE_ERROR for the partition, in seconds
      copy the new closed segment          RemoteStorageError; rollback published
                                           DELETE_SEGMENT_STARTED (the objects cannot be
                                           deleted yet); highest remote offset unchanged, the
                                           local segments kept
    store back
      fetch offset 0                       records again
      finish the rollback (expiry's        DELETE_SEGMENT_FINISHED, no object of that attempt
      DELETE_RETRY), copy again            the segment FINISHED under a new segment id
      consume from 0 (kafka-python)        all 800 records

Kill story (``test_copy_killed_...``)::

    600 records; a copy process uploads the first object of segment 0 and is SIGKILLed
                                           remote: seg 0 COPY_SEGMENT_STARTED (one object)
    local retention runs                   deletes nothing (nothing FINISHED)
    the next copy run                      seg 0 again under a new id -> FINISHED, then 1..k
                                           the stale STARTED stays (the reconcile job's work)
    local retention                        only what FINISHED segments cover is deleted
    stale object removed, consume from 0   every record: reads never used the stale copy
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kio.schema.errors import ErrorCode

from storage_core.client import KafkaAdminClient, KafkaCluster
from storage_core.common import TopicIdPartition
from storage_core.common import TopicPartition as StorageTopicPartition
from storage_core.tiered.metadata.states import RemoteLogSegmentState
from storage_core.tiered.operations.segment_deletion import delete_segment
from storage_core.tiered.remote_storage_manager import RemoteStorageError
from storage_core.tiered.s3_remote_storage_manager import S3RemoteStorageManager
from tests.broker_process import BrokerProcess
from tests.s3_server import AWS_TEST_ENV, S3Server
from tests.tcp_relay import TcpRelay
from tests.tiered_broker_support import (
    EARLIEST_LOCAL,
    LATEST,
    LATEST_TIERED,
    batch_offsets,
    client_rlmm,
    copy_eligible_segments,
    list_offset,
    local_offsets,
    raw_fetch,
    wait_until,
)

pytestmark = pytest.mark.timeout(240)

REPO = Path(__file__).resolve().parents[2]
TOPIC = "tiered-faults"
BUCKET = "tiered-faults"
RECORDS = 600
MORE_RECORDS = 200
SEGMENT_BYTES = 16 * 1024
LOCAL_WITHIN_S = 1.0
# Attempts are bounded by s3.retry.total.timeout.ms (2 s) plus one read timeout (1 s).
TIERED_ERROR_WITHIN_S = 5.0


@dataclass
class Store:
    s3: S3Server
    relay: TcpRelay

    def rsm_config(self) -> dict[str, str]:
        """What the broker and the copy runs use: the relay as the endpoint, short bounds."""
        return {
            "rsm.config.s3.bucket.name": BUCKET,
            "rsm.config.s3.key.prefix": "cluster-a",
            "rsm.config.s3.endpoint.url": self.relay.url,
            "rsm.config.s3.path.style.access.enabled": "true",
            "rsm.config.s3.connect.timeout.ms": "500",
            "rsm.config.s3.read.timeout.ms": "1000",
            "rsm.config.s3.retry.max.attempts": "3",
            "rsm.config.s3.retry.backoff.ms": "50",
            "rsm.config.s3.retry.backoff.max.ms": "200",
            "rsm.config.s3.retry.total.timeout.ms": "2000",
        }

    def rsm(self) -> S3RemoteStorageManager:
        return S3RemoteStorageManager.from_config(self.rsm_config())

    def object_keys(self) -> list[str]:
        listed = self.s3.client().list_objects_v2(Bucket=BUCKET)
        return [item["Key"] for item in listed.get("Contents", [])]


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    """moto behind a relay; credentials only in the environment (the broker inherits it)."""
    for name in ("AWS_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in AWS_TEST_ENV.items():
        monkeypatch.setenv(name, value)
    with S3Server(tmp_path / "moto") as s3, TcpRelay(target_port=s3.port) as relay:
        s3.create_bucket(BUCKET)
        yield Store(s3, relay)


@pytest.fixture
def broker(tmp_path: Path, store: Store) -> Iterator[BrokerProcess]:
    with BrokerProcess(
        tmp_path / "broker",
        overrides={
            "remote.log.storage.system.enable": "true",
            "remote.log.storage.manager.class.name": "S3RemoteStorageManager",
            **store.rsm_config(),
            "remote.log.metadata.topic.num.partitions": "1",
            "remote.log.manager.task.interval.ms": "200",
            "log.retention.check.interval.ms": "200",
        },
    ) as process:
        yield process


def value_of(i: int) -> bytes:
    return f"record-{i:05d}-".encode() * 8


def create_topic(bootstrap: str) -> TopicIdPartition:
    with KafkaCluster(bootstrap) as cluster:
        created = KafkaAdminClient(cluster).create_topic(
            TOPIC,
            num_partitions=1,
            replication_factor=1,
            configs={
                "remote.storage.enable": "true",
                "segment.bytes": str(SEGMENT_BYTES),
                "local.retention.bytes": str(2 * SEGMENT_BYTES),
            },
        )
    assert created.topic_id is not None
    return TopicIdPartition(created.topic_id, StorageTopicPartition(TOPIC, 0))


def produce(bootstrap: str, first: int, count: int) -> list[float]:
    """Produce records ``first..first+count`` with acks=all, one at a time; the latencies."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
    latencies = []
    try:
        for i in range(first, first + count):
            start = time.monotonic()
            producer.send(TOPIC, value=value_of(i), partition=0).get(timeout=10)
            latencies.append(time.monotonic() - start)
    finally:
        producer.close()
    return latencies


def consume_all(bootstrap: str, count: int) -> list[tuple[int, bytes]]:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        consumer_timeout_ms=20_000,
        max_partition_fetch_bytes=8192,
    )
    try:
        tp = TopicPartition(TOPIC, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        out: list[tuple[int, bytes]] = []
        for message in consumer:
            out.append((message.offset, message.value))
            if len(out) == count:
                break
        return out
    finally:
        consumer.close()


def expected(count: int) -> list[tuple[int, bytes]]:
    return [(i, value_of(i)) for i in range(count)]


def assert_local_log_covers_what_is_not_finished_remotely(
    partition_dir: Path, bootstrap: str, finished_end_offset: int
) -> int:
    """Every offset above the last FINISHED remote offset is in the local segment files,
    contiguously up to the log end offset; returns the local log start offset.

    The files are listed before the broker is asked: local retention keeps deleting
    segments meanwhile, and the local log start it answers afterwards can only be later."""
    held = local_offsets(partition_dir)
    local_start, _ = list_offset(bootstrap, TOPIC, EARLIEST_LOCAL)
    log_end, _ = list_offset(bootstrap, TOPIC, LATEST)
    assert local_start <= finished_end_offset + 1
    assert held == list(range(held[0], log_end))
    assert held[0] <= max(local_start, 0)
    return local_start


@pytest.mark.parametrize("outage", ["refused", "blackhole"])
def test_store_outage_keeps_local_traffic_fast_fails_tiered_reads_and_recovers(
    broker: BrokerProcess, store: Store, outage: str
) -> None:
    bootstrap = broker.bootstrap
    partition_dir = broker.log_dir / f"{TOPIC}-0"
    tip = create_topic(bootstrap)
    produce(bootstrap, 0, RECORDS)
    rsm = store.rsm()
    with client_rlmm(bootstrap) as rlmm:
        copied = copy_eligible_segments(bootstrap, partition_dir, TOPIC, rsm, rlmm)
        assert len(copied) >= 5
        highest = copied[-1].end_offset
        wait_until(
            lambda: list_offset(bootstrap, TOPIC, EARLIEST_LOCAL)[0] > 0,
            "local retention to delete copied segments",
        )
        assert consume_all(bootstrap, RECORDS) == expected(RECORDS)

        if outage == "refused":
            store.relay.stop()
        else:
            store.relay.blackhole()
        with ThreadPoolExecutor(3) as pool:
            tiered = [
                pool.submit(raw_fetch, broker.port, TOPIC, 0, max_wait_ms=15_000) for _ in range(3)
            ]
            latencies = produce(bootstrap, RECORDS, MORE_RECORDS)
            # Records produced during the outage cannot have left the local log.
            local = raw_fetch(broker.port, TOPIC, RECORDS, max_wait_ms=5_000)
            results = [f.result() for f in tiered]
        assert max(latencies) < LOCAL_WITHIN_S, max(latencies)
        assert local.error_code == ErrorCode.none
        assert local.elapsed_s < LOCAL_WITHIN_S, local.elapsed_s
        assert batch_offsets(local.records)[0] <= RECORDS
        for result in results:
            assert result.error_code == ErrorCode.kafka_storage_error
            assert result.elapsed_s < TIERED_ERROR_WITHIN_S, result.elapsed_s

        # A copy attempt of the new closed segment fails and is rolled back as far as it can.
        assert len(sorted(partition_dir.glob("*.log"))) >= 3
        started = time.monotonic()
        with pytest.raises(RemoteStorageError):
            copy_eligible_segments(bootstrap, partition_dir, TOPIC, rsm, rlmm)
        assert time.monotonic() - started < 2 * TIERED_ERROR_WITHIN_S
        attempts = [m for m in rlmm.list_remote_log_segments(tip) if m.start_offset > highest]
        assert [(m.start_offset, m.state) for m in attempts] == [
            (highest + 1, RemoteLogSegmentState.DELETE_SEGMENT_STARTED)
        ]
        (failed,) = attempts
        assert list_offset(bootstrap, TOPIC, LATEST_TIERED)[0] == highest
        assert_local_log_covers_what_is_not_finished_remotely(partition_dir, bootstrap, highest)

        store.relay.start()
        wait_until(
            lambda: raw_fetch(broker.port, TOPIC, 0).error_code == ErrorCode.none,
            "tiered reads to recover",
        )
        assert batch_offsets(raw_fetch(broker.port, TOPIC, 0).records)[0] == 0
        # Expiry retries the deletion (DELETE_RETRY); the copy job copies the segment again.
        delete_segment(failed, rsm=rsm, rlmm=rlmm, broker_id=0, reason="failed copy")
        again = copy_eligible_segments(bootstrap, partition_dir, TOPIC, rsm, rlmm)
        assert again[0].start_offset == highest + 1
        assert again[0].remote_log_segment_id != failed.remote_log_segment_id
        assert not [k for k in store.object_keys() if str(failed.remote_log_segment_id.id) in k]
        wait_until(
            lambda: list_offset(bootstrap, TOPIC, LATEST_TIERED)[0] == again[-1].end_offset,
            "the broker to see the new copies",
        )
    assert consume_all(bootstrap, RECORDS + MORE_RECORDS) == expected(RECORDS + MORE_RECORDS)


def test_copy_killed_between_started_and_finished_is_copied_again_and_loses_nothing(
    broker: BrokerProcess, store: Store, tmp_path: Path
) -> None:
    bootstrap = broker.bootstrap
    partition_dir = broker.log_dir / f"{TOPIC}-0"
    tip = create_topic(bootstrap)
    produce(bootstrap, 0, RECORDS)
    marker = tmp_path / "first-object-uploaded"
    output = (tmp_path / "copy-worker.log").open("wb")
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.integration.copy_worker",
            "--bootstrap",
            bootstrap,
            "--partition-dir",
            str(partition_dir),
            "--topic",
            TOPIC,
            "--rsm-config",
            json.dumps(store.rsm_config()),
            "--hang-after-first-object",
            str(marker),
        ],
        cwd=REPO,
        stdout=output,
        stderr=subprocess.STDOUT,
    )
    output.close()
    try:
        wait_until(lambda: marker.exists() or worker.poll() is not None, "the first object", 60)
        assert worker.poll() is None, (tmp_path / "copy-worker.log").read_text()
        os.kill(worker.pid, signal.SIGKILL)
    finally:
        if worker.poll() is None:
            worker.kill()
        worker.wait()
    assert worker.returncode == -signal.SIGKILL

    with client_rlmm(bootstrap) as rlmm:
        wait_until(lambda: any(True for _ in rlmm.list_remote_log_segments(tip)), "metadata")
        (stale,) = rlmm.list_remote_log_segments(tip)
        assert (stale.start_offset, stale.state) == (0, RemoteLogSegmentState.COPY_SEGMENT_STARTED)
        stale_keys = [k for k in store.object_keys() if str(stale.remote_log_segment_id.id) in k]
        assert len(stale_keys) == 1 and stale_keys[0].endswith(".log")

        # Nothing is FINISHED: local retention keeps everything, nothing reads remotely.
        time.sleep(1.0)  # five retention checks and RLM task runs
        assert list_offset(bootstrap, TOPIC, LATEST_TIERED)[0] == -1
        assert list_offset(bootstrap, TOPIC, EARLIEST_LOCAL)[0] == 0
        assert local_offsets(partition_dir) == list(range(RECORDS))

        # The next copy run: segment 0 again under a new id, then the rest.
        copied = copy_eligible_segments(bootstrap, partition_dir, TOPIC, store.rsm(), rlmm)
        assert copied[0].start_offset == 0
        assert copied[0].remote_log_segment_id != stale.remote_log_segment_id
        states = {
            m.remote_log_segment_id: m.state
            for m in rlmm.list_remote_log_segments(tip)
            if m.start_offset == 0
        }
        assert states == {
            stale.remote_log_segment_id: RemoteLogSegmentState.COPY_SEGMENT_STARTED,
            copied[0].remote_log_segment_id: RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
        }
        _, epoch = list_offset(bootstrap, TOPIC, LATEST_TIERED)
        readable = rlmm.remote_log_segment_metadata(tip, epoch, 0)
        assert readable is not None
        assert readable.remote_log_segment_id == copied[0].remote_log_segment_id

    finished_end = copied[-1].end_offset
    wait_until(
        lambda: list_offset(bootstrap, TOPIC, EARLIEST_LOCAL)[0] > 0,
        "local retention to delete copied segments",
    )
    local_start = assert_local_log_covers_what_is_not_finished_remotely(
        partition_dir, bootstrap, finished_end
    )
    assert local_start > 0

    # The stale attempt's object is no part of any read: remove it, every record is there.
    store.s3.client().delete_object(Bucket=BUCKET, Key=stale_keys[0])
    assert consume_all(bootstrap, RECORDS) == expected(RECORDS)
