"""KIP-956's remote fetch quota on a broker process, set and removed while it runs as an
operator does (``kafka-configs --entity-type brokers --entity-default --alter --add-config
remote.log.manager.fetch.max.bytes.per.second=N``, here as Kafka's tool sends it:
IncrementalAlterConfigs of the BROKER resource named "", which neither confluent-kafka nor
kafka-python lets through; confluent-kafka reads the result back)::

    produce 600 records (16 KiB segments), copy the closed ones, local retention drops them
    no quota                    tiered fetch of offset 0: B bytes of records (a remote read)
    quota N = B / 3 B/s         DescribeConfigs: N, DYNAMIC_DEFAULT_BROKER_CONFIG
    (cluster default)
    tiered fetch of offset 0    no records, no error, after max.wait.ms (not a remote read:
                                RemoteFetchRequests unchanged); remote-fetch-throttle-time
                                -avg/-max on /metrics > 0
    fetches go on               the records come once the rate is back at N: B / N = 3 s
                                after the first read (Kafka's windows), not before
    quota deleted               a fetch at once reads from the remote tier again
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, ResourceType
from kafka import KafkaProducer
from kio.schema.errors import ErrorCode

from embedded.ports import free_port
from storage_core.client import (
    AlterConfigOp,
    AlterConfigOpType,
    ConfigResourceType,
    KafkaAdminClient,
    KafkaCluster,
)
from storage_core.tiered.local_tiered_storage import LocalTieredStorage
from tests.broker_process import BrokerProcess
from tests.prometheus_text import parse_exposition
from tests.tiered_broker_support import (
    EARLIEST_LOCAL,
    batch_offsets,
    client_rlmm,
    copy_eligible_segments,
    list_offset,
    raw_fetch,
    wait_until,
)

pytestmark = pytest.mark.timeout(120)

TOPIC = "tiered-fetch-quota"
RECORDS = 600
SEGMENT_BYTES = 16 * 1024
QUOTA = "remote.log.manager.fetch.max.bytes.per.second"
THROTTLED_S = 3  # the first read's bytes / the quota
MAX_WAIT_MS = 400
THROTTLE = "kafka_server_remotelogmanager_remote_fetch_throttle_time_"
REMOTE_FETCHES = "kafka_server_brokertopicmetrics_remotefetchrequestspersec_count"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[tuple[BrokerProcess, int]]:
    metrics_port = free_port()
    with BrokerProcess(
        tmp_path,
        overrides={
            "metrics.port": str(metrics_port),
            "remote.log.storage.system.enable": "true",
            "remote.log.storage.manager.class.name": "LocalTieredStorage",
            "rsm.config.local.storage.dir": str(tmp_path / "remote-tier"),
            "rsm.config.local.fsync": "false",
            "remote.log.metadata.topic.num.partitions": "1",
            "remote.log.manager.task.interval.ms": "200",
            "log.retention.check.interval.ms": "200",
        },
    ) as process:
        yield process, metrics_port


def scrape(metrics_port: int) -> dict[str, float]:
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        samples = parse_exposition(response.read().decode("utf-8"))[1]
    return {name: value for (name, labels), value in samples.items() if not labels}


def alter_default(bootstrap: str, value: str | None) -> None:
    """The cluster-wide default broker config (kafka-configs --entity-default)."""
    operation = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
    with KafkaCluster(bootstrap) as cluster:
        KafkaAdminClient(cluster).incremental_alter_configs(
            ConfigResourceType.BROKER, "", [AlterConfigOp(name=QUOTA, op=operation, value=value)]
        )


def test_throttled_tiered_fetch_answers_no_records_then_the_records(
    broker: tuple[BrokerProcess, int],
) -> None:
    process, metrics_port = broker
    bootstrap = process.bootstrap
    with KafkaCluster(bootstrap) as cluster:
        KafkaAdminClient(cluster).create_topic(
            TOPIC,
            num_partitions=1,
            replication_factor=1,
            configs={
                "remote.storage.enable": "true",
                "segment.bytes": str(SEGMENT_BYTES),
                "local.retention.bytes": str(2 * SEGMENT_BYTES),
            },
        )
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
    for i in range(RECORDS):
        producer.send(TOPIC, value=f"record-{i:05d}-".encode() * 8, partition=0)
        if i % 50 == 49:
            producer.flush()
    producer.flush()
    producer.close()
    partition_dir = process.log_dir / f"{TOPIC}-0"
    rsm = LocalTieredStorage(process.log_dir.parent / "remote-tier", fsync=False)
    with client_rlmm(bootstrap) as rlmm:
        assert copy_eligible_segments(bootstrap, partition_dir, TOPIC, rsm, rlmm)
    wait_until(
        lambda: list_offset(bootstrap, TOPIC, EARLIEST_LOCAL)[0] > 0,
        "local retention to delete copied segments",
    )
    admin = AdminClient({"bootstrap.servers": bootstrap})

    # No quota yet: tiered reads are not throttled.
    first = raw_fetch(process.port, TOPIC, 0, max_bytes=4096, max_wait_ms=MAX_WAIT_MS)
    first_at = time.monotonic()
    assert (first.error_code, batch_offsets(first.records)[0]) == (ErrorCode.none, 0)
    quota = len(first.records) // THROTTLED_S

    alter_default(bootstrap, str(quota))
    resource = ConfigResource(ResourceType.BROKER, "0")
    entry = admin.describe_configs([resource])[resource].result(timeout=15)[QUOTA]
    assert entry.value == str(quota)
    assert entry.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    remote_fetches = scrape(metrics_port)[REMOTE_FETCHES]

    throttled = raw_fetch(process.port, TOPIC, 0, max_bytes=4096, max_wait_ms=MAX_WAIT_MS)
    assert throttled.error_code == ErrorCode.none
    assert throttled.records == b""
    assert throttled.elapsed_s >= MAX_WAIT_MS / 1000 * 0.9  # waited as a fetch without data
    assert throttled.high_watermark == RECORDS
    metrics = scrape(metrics_port)
    assert metrics[THROTTLE + "max_value"] > 0
    assert metrics[THROTTLE + "avg_value"] > 0
    assert metrics[REMOTE_FETCHES] == remote_fetches  # nothing read from the store

    # Over the quota until the bytes read over the time since the first read are back at it.
    allowed_after_s = len(first.records) / quota
    while True:
        again = raw_fetch(process.port, TOPIC, 0, max_bytes=4096, max_wait_ms=MAX_WAIT_MS)
        assert again.error_code == ErrorCode.none
        if again.records:
            break
        assert time.monotonic() - first_at < allowed_after_s + 5, "the records never came"
    assert again.records == first.records
    assert time.monotonic() - first_at >= allowed_after_s - 0.1

    # kafka-configs --delete-config: no quota at once, even right after a read.
    alter_default(bootstrap, None)
    for _ in range(3):
        unthrottled = raw_fetch(process.port, TOPIC, 0, max_bytes=4096, max_wait_ms=MAX_WAIT_MS)
        assert unthrottled.records == first.records
