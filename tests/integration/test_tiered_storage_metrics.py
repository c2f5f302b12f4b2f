"""Tiered-storage series of ``/metrics`` on a broker process, checked against oracles.

Story::

    produce 600 records (16 KiB segments)   lag = the closed segments' files (sizes on disk)
    copy them (operations library)          lag 0; remote size = the remote .log files' sizes;
                                            metadata count = segments copied
    raw fetch of offset 0 (tiered)          RemoteFetchRequests 1, RemoteFetchBytes = the
                                            record bytes of that response, no error
    remote .log objects removed             the next tiered fetch: UNKNOWN_SERVER_ERROR (lost) and
                                            RemoteFetchErrors 1

Each series is checked per topic and broker-wide (one topic: the same value).
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaProducer
from kio.schema.errors import ErrorCode

from embedded.ports import free_port
from storage_core.client import KafkaAdminClient, KafkaCluster
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

pytestmark = pytest.mark.timeout(180)

TOPIC = "tiered-metered"
RECORDS = 600
SEGMENT_BYTES = 16 * 1024
PREFIX = "kafka_server_brokertopicmetrics_"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


class MeteredTieredBroker:
    def __init__(self, process: BrokerProcess, metrics_port: int, remote_dir: Path) -> None:
        self.process = process
        self.metrics_port = metrics_port
        self.remote_dir = remote_dir

    def scrape(self) -> Samples:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode("utf-8")
        return parse_exposition(text)[1]

    def value(self, series: str) -> tuple[float | None, float | None]:
        """(per topic, broker-wide) value of ``series``; None when absent."""
        samples = self.scrape()
        name = PREFIX + series
        return (
            samples.get((name, frozenset({("topic", TOPIC)}))),
            samples.get((name, frozenset())),
        )


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[MeteredTieredBroker]:
    metrics_port = free_port()
    remote_dir = tmp_path / "remote-tier"
    with BrokerProcess(
        tmp_path,
        overrides={
            "metrics.port": str(metrics_port),
            "remote.log.storage.system.enable": "true",
            "remote.log.storage.manager.class.name": "LocalTieredStorage",
            "rsm.config.local.storage.dir": str(remote_dir),
            "rsm.config.local.fsync": "false",
            "remote.log.metadata.topic.num.partitions": "1",
            "remote.log.manager.task.interval.ms": "200",
            "log.retention.check.interval.ms": "200",
        },
    ) as process:
        yield MeteredTieredBroker(process, metrics_port, remote_dir)


def both(broker: MeteredTieredBroker, series: str, expected: float) -> bool:
    return broker.value(series) == (expected, expected)


def test_remote_fetch_meters_and_copy_gauges(broker: MeteredTieredBroker) -> None:
    bootstrap = broker.process.bootstrap
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
    partition_dir = broker.process.log_dir / f"{TOPIC}-0"

    # Before any copy: every closed segment is lag (all below the HW with acks=all).
    closed = sorted(partition_dir.glob("*.log"))[:-1]
    assert len(closed) >= 5
    closed_bytes = sum(p.stat().st_size for p in closed)
    wait_until(lambda: both(broker, "remotecopylagsegments_value", len(closed)), "lag segments")
    assert broker.value("remotecopylagbytes_value") == (closed_bytes, closed_bytes)
    assert broker.value("remotelogsizebytes_value") == (0, 0)
    assert broker.value("remotelogmetadatacount_value") == (0, 0)

    rsm = LocalTieredStorage(broker.remote_dir, fsync=False)
    with client_rlmm(bootstrap) as rlmm:
        copied = copy_eligible_segments(bootstrap, partition_dir, TOPIC, rsm, rlmm)
    assert len(copied) == len(closed)
    remote_logs = list(broker.remote_dir.rglob("*.log"))
    remote_bytes = sum(p.stat().st_size for p in remote_logs)
    assert remote_bytes == closed_bytes
    wait_until(lambda: both(broker, "remotecopylagsegments_value", 0), "lag to drop to 0")
    wait_until(lambda: both(broker, "remotelogsizebytes_value", remote_bytes), "remote size")
    assert broker.value("remotecopylagbytes_value") == (0, 0)
    assert broker.value("remotelogmetadatacount_value") == (len(copied), len(copied))
    wait_until(
        lambda: list_offset(bootstrap, TOPIC, EARLIEST_LOCAL)[0] > 0,
        "local retention to delete copied segments",
    )

    # One tiered read: counted once, with exactly the bytes the response carried.
    assert broker.value("remotefetchrequestspersec_count") == (None, None)
    fetched = raw_fetch(broker.process.port, TOPIC, 0, max_bytes=4096)
    assert fetched.error_code == ErrorCode.none
    assert batch_offsets(fetched.records)[0] == 0
    wait_until(lambda: both(broker, "remotefetchrequestspersec_count", 1), "remote fetch count")
    size = len(fetched.records)
    assert broker.value("remotefetchbytespersec_count") == (size, size)
    assert broker.value("remotefetcherrorspersec_count") == (None, None)

    # The store loses the segment data: the next tiered read fails and is counted.
    for path in remote_logs:
        path.unlink()
    failed = raw_fetch(broker.process.port, TOPIC, 0, max_bytes=4096)
    assert failed.error_code == ErrorCode.unknown_server_error  # lost: not retriable
    wait_until(lambda: both(broker, "remotefetcherrorspersec_count", 1), "remote fetch errors")
    assert broker.value("remotefetchrequestspersec_count") == (2, 2)
    assert broker.value("remotefetchbytespersec_count") == (size, size)
