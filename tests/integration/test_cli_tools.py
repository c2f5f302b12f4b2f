"""``storage-core topics|produce|consume`` and the protocol client against a broker process.

The commands run as a user runs them (subprocesses, stdin/stdout/stderr, exit codes). Records
written by the project's client are read back equal by kafka-python (an independent
client), and records written by kafka-python are read back equal by the project's client.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from kafka import KafkaConsumer as KPConsumer
from kafka import KafkaProducer as KPProducer
from kafka import TopicPartition as KPTopicPartition

from embedded.ports import free_port
from storage_core.client import (
    ACKS_LEADER,
    ACKS_NONE,
    ApiKey,
    ConnectionConfig,
    KafkaAdminClient,
    KafkaCluster,
    KafkaConsumer,
    KafkaProducer,
)
from storage_core.client.negotiation import CLIENT_API_VERSIONS
from storage_core.records.compression import CompressionType
from storage_core.records.record import Header, SimpleRecord
from storage_core.tools.produce import generated_value
from tests.broker_process import BrokerProcess

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("broker")) as process:
        yield process


def cli(
    broker: BrokerProcess | None, *argv: str, stdin: bytes = b""
) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "storage_core.cli", *argv]
    if broker is not None:
        command += ["--bootstrap-server", broker.bootstrap]
    raw = subprocess.run(command, input=stdin, capture_output=True, timeout=120, check=False)
    # decoded without newline translation, so that a progress line's \r stays visible
    return subprocess.CompletedProcess(
        raw.args, raw.returncode, raw.stdout.decode(), raw.stderr.decode()
    )


def ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, result.stderr
    return result


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


# ---------------------------------------------------------------------------- topics
def test_topic_lifecycle(broker: BrokerProcess) -> None:
    created = ok(
        cli(
            broker, "topics", "create", "--topic", "orders", "--partitions", "3",
            "--replication-factor", "1", "--config", "retention.ms=3600000",
        )
    )  # fmt: skip
    assert created.stdout.strip() == "Created topic orders."
    assert "orders" in ok(cli(broker, "topics", "list")).stdout.split()

    described = ok(cli(broker, "topics", "describe", "--topic", "orders")).stdout
    summary, *partitions = described.strip().splitlines()
    fields = dict(part.split(": ", 1) for part in summary.split("\t"))
    assert fields["Topic"] == "orders"
    assert len(fields["TopicId"]) == 22  # base64 Uuid
    assert fields["PartitionCount"] == "3"
    assert fields["ReplicationFactor"] == "1"
    assert [p.split("\t")[2:] for p in partitions] == [
        [f"Partition: {i}", "Leader: 0", "Replicas: 0", "Isr: 0"] for i in range(3)
    ]
    with KafkaCluster(broker.bootstrap) as cluster:
        metadata = cluster.refresh_metadata(["orders"]).topic("orders")
        assert metadata is not None
        assert str(metadata.topic_id) == fields["TopicId"]

    altered = ok(
        cli(broker, "topics", "alter-config", "--topic", "orders", "--set", "retention.ms=60000")
    )
    assert altered.stdout.strip() == "Updated config of topic orders."
    described = ok(cli(broker, "topics", "describe", "--topic", "orders")).stdout
    assert "Configs: retention.ms=60000" in described.splitlines()[0]

    assert ok(cli(broker, "topics", "delete", "--topic", "orders")).stdout.strip() == (
        "Deleted topic orders."
    )
    assert "orders" not in ok(cli(broker, "topics", "list")).stdout.split()
    error = one_line_error(cli(broker, "topics", "describe", "--topic", "orders"))
    assert "UNKNOWN_TOPIC_OR_PARTITION" in error


def test_alter_config_is_visible_in_describe(broker: BrokerProcess) -> None:
    ok(cli(broker, "topics", "create", "--topic", "retained", "--partitions", "1"))
    ok(cli(broker, "topics", "alter-config", "--topic", "retained", "--set", "retention.ms=1234"))
    with KafkaCluster(broker.bootstrap) as cluster:
        admin = KafkaAdminClient(cluster)
        (description,) = admin.describe_topics(["retained"])
        configs = {c.name: c.value for c in description.configs}
        assert configs["retention.ms"] == "1234"
    ok(cli(broker, "topics", "alter-config", "--topic", "retained", "--delete", "retention.ms"))
    described = ok(cli(broker, "topics", "describe", "--topic", "retained")).stdout
    assert "retention.ms" not in described.splitlines()[0]


# ---------------------------------------------------------------------------- produce/consume
def test_produce_generated_and_stdin_then_consume(broker: BrokerProcess) -> None:
    ok(cli(broker, "topics", "create", "--topic", "cli-data", "--partitions", "2"))

    generated = ok(
        cli(broker, "produce", "--topic", "cli-data", "--partition", "1", "--count", "10000",
            "--record-size", "120", "--compression", "lz4", "--progress")
    )  # fmt: skip
    assert "\r" in generated.stderr  # the progress line
    assert generated.stderr.strip().endswith(
        "Produced 10000 records to cli-data-1 (offsets 0..9999)"
    )

    lines = b"k1:first line\nk2:second: with colon\nk3:\n"
    piped = ok(
        cli(broker, "produce", "--topic", "cli-data", "--partition", "1", "--key-separator", ":",
            "--acks", "1", stdin=lines)
    )  # fmt: skip
    assert "\r" not in piped.stderr  # no progress line when stderr is not a terminal
    assert piped.stderr.strip() == "Produced 3 records to cli-data-1 (offsets 10000..10002)"

    consumed = ok(
        cli(broker, "consume", "--topic", "cli-data", "--partition", "1", "--offset", "earliest",
            "--count", "10003", "--json")
    )  # fmt: skip
    rows = [json.loads(line) for line in consumed.stdout.splitlines()]
    assert [r["offset"] for r in rows] == list(range(10003))
    assert [r["value"] for r in rows[:10000]] == [
        generated_value(i, 120).decode() for i in range(10000)
    ]
    assert [(r["key"], r["value"]) for r in rows[10000:]] == [
        ("k1", "first line"),
        ("k2", "second: with colon"),
        ("k3", ""),
    ]
    now_ms = time.time() * 1000
    assert all(now_ms - 600_000 < r["timestamp"] <= now_ms for r in rows)
    assert consumed.stderr.strip() == "Processed a total of 10003 messages"

    from_offset = ok(
        cli(broker, "consume", "--topic", "cli-data", "--partition", "1", "--offset", "9999",
            "--count", "2", "--print-offsets")
    )  # fmt: skip
    assert from_offset.stdout.splitlines() == [
        f"9999\t{generated_value(9999, 120).decode()}",
        "10000\tfirst line",
    ]

    latest = ok(
        cli(broker, "consume", "--topic", "cli-data", "--partition", "1", "--offset", "latest",
            "--timeout-ms", "500")
    )  # fmt: skip
    assert latest.stdout == ""
    assert latest.stderr.strip() == "Processed a total of 0 messages"


def test_consume_earliest_of_an_empty_partition(broker: BrokerProcess) -> None:
    ok(cli(broker, "topics", "create", "--topic", "empty"))
    with KafkaCluster(broker.bootstrap) as cluster:
        assert KafkaConsumer(cluster).earliest_offset("empty", 0) == 0
    untouched = ok(
        cli(broker, "consume", "--topic", "empty", "--offset", "earliest", "--timeout-ms", "300")
    )
    assert untouched.stdout == ""


def test_one_line_errors(broker: BrokerProcess) -> None:
    error = one_line_error(
        cli(broker, "consume", "--topic", "no-such-topic", "--offset", "earliest", "--count", "1")
    )
    assert "no-such-topic" in error and "UNKNOWN_TOPIC_OR_PARTITION" in error
    error = one_line_error(cli(broker, "produce", "--topic", "no-such-topic", stdin=b"x\n"))
    assert "UNKNOWN_TOPIC_OR_PARTITION" in error
    error = one_line_error(cli(broker, "topics", "create", "--topic", "bad/name"))
    assert "bad/name" in error and "INVALID_TOPIC_EXCEPTION" in error
    error = one_line_error(cli(broker, "topics", "create", "--topic", "x" * 250))
    assert "INVALID_TOPIC_EXCEPTION" in error
    ok(cli(broker, "topics", "create", "--topic", "twice"))
    error = one_line_error(cli(broker, "topics", "create", "--topic", "twice"))
    assert "TOPIC_ALREADY_EXISTS" in error
    error = one_line_error(cli(broker, "produce", "--topic", "twice", "--key-separator", ":",
                               stdin=b"a:1\nno separator\n"))  # fmt: skip
    assert "line 2 has no key separator" in error
    error = one_line_error(cli(broker, "consume", "--topic", "twice", "--offset", "soon"))
    assert "--offset" in error


def test_unreachable_broker_is_one_line() -> None:
    port = free_port()
    result = cli(None, "topics", "--bootstrap-server", f"127.0.0.1:{port}", "list")
    error = one_line_error(result)
    assert f"cannot connect to broker 127.0.0.1:{port}" in error


# ---------------------------------------------------------------------------- client API
def _records(count: int, base_ms: int) -> list[SimpleRecord]:
    return [
        SimpleRecord(
            key=None if i % 4 == 3 else f"key-{i}".encode(),
            value=None if i % 10 == 9 else f"value-{i}-".encode() * (1 + i % 5),
            headers=(Header(key="i", value=str(i).encode()), Header(key="null", value=None))
            if i % 3 == 0
            else (),
            timestamp=base_ms + i,
        )
        for i in range(count)
    ]


@pytest.mark.parametrize("codec", list(CompressionType))
def test_client_round_trip_and_offsets_by_timestamp(
    broker: BrokerProcess, codec: CompressionType
) -> None:
    topic = f"client-{codec.display_name}"
    base_ms = 1_700_000_000_000
    sent = _records(500, base_ms)
    with KafkaCluster(broker.bootstrap) as cluster:
        KafkaAdminClient(cluster).create_topic(topic, num_partitions=1, replication_factor=1)
        producer = KafkaProducer(cluster, compression=codec, max_batch_bytes=4096)
        results = producer.send(topic, 0, sent)
        assert results[0].base_offset == 0
        assert sum(r.record_count for r in results) == 500
        consumer = KafkaConsumer(cluster, partition_max_bytes=8192)
        got = list(consumer.consume(topic, 0, 0, max_records=500))
        assert [r.offset for r in got] == list(range(500))
        assert [(r.key, r.value, r.headers, r.timestamp) for r in got] == [
            (s.key, s.value, s.headers, s.timestamp) for s in sent
        ]
        assert consumer.earliest_offset(topic, 0) == 0
        assert consumer.latest_offset(topic, 0) == 500
        assert consumer.list_offset(topic, 0, base_ms + 123).offset == 123
        assert consumer.list_offset(topic, 0, base_ms + 10_000).offset == -1


def test_kafka_python_reads_what_the_client_wrote(broker: BrokerProcess) -> None:
    topic = "client-to-kafka-python"
    sent = _records(300, int(time.time() * 1000) - 1000)
    with KafkaCluster(broker.bootstrap) as cluster:
        KafkaAdminClient(cluster).create_topic(topic, num_partitions=2, replication_factor=1)
        KafkaProducer(cluster, compression=CompressionType.GZIP, max_batch_bytes=2048).send(
            topic, 1, sent
        )
    consumer = KPConsumer(bootstrap_servers=broker.bootstrap, group_id=None)
    try:
        tp = KPTopicPartition(topic, 1)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got = []
        deadline = time.monotonic() + 30
        while len(got) < len(sent) and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                got.extend(batch)
    finally:
        consumer.close()
    assert [m.offset for m in got] == list(range(300))
    assert [(m.key, m.value, list(m.headers), m.timestamp) for m in got] == [
        (s.key, s.value, [(h.key, h.value) for h in s.headers], s.timestamp) for s in sent
    ]


def test_client_reads_what_kafka_python_wrote(broker: BrokerProcess) -> None:
    topic = "kafka-python-to-client"
    with KafkaCluster(broker.bootstrap) as cluster:
        KafkaAdminClient(cluster).create_topic(topic, num_partitions=1, replication_factor=1)
    base_ms = int(time.time() * 1000) - 5000
    producer = KPProducer(bootstrap_servers=broker.bootstrap, acks="all", compression_type="zstd")
    sent = []
    try:
        for i in range(200):
            key = None if i % 7 == 0 else f"k{i}".encode()
            value = f"kafka-python-{i}".encode() * (1 + i % 3)
            headers = [("n", str(i).encode())] if i % 2 else []
            future = producer.send(topic, key=key, value=value, headers=headers,
                                   partition=0, timestamp_ms=base_ms + i)  # fmt: skip
            sent.append((key, value, headers, base_ms + i, future))
        producer.flush()
        offsets = [future.get(10).offset for *_rest, future in sent]
    finally:
        producer.close()
    with KafkaCluster(broker.bootstrap) as cluster:
        got = list(KafkaConsumer(cluster).consume(topic, 0, 0, max_records=200))
    assert [r.offset for r in got] == offsets == list(range(200))
    assert [(r.key, r.value, [(h.key, h.value) for h in r.headers], r.timestamp) for r in got] == [
        (key, value, headers, ts) for key, value, headers, ts, _future in sent
    ]


NON_FLEXIBLE = {
    ApiKey.PRODUCE: (3,),
    ApiKey.FETCH: (4,),
    ApiKey.LIST_OFFSETS: (1,),
    ApiKey.METADATA: (4,),
    ApiKey.CREATE_TOPICS: (4,),
    ApiKey.DELETE_TOPICS: (1,),
}


@pytest.mark.parametrize("pinned", [{}, NON_FLEXIBLE], ids=["newest", "non-flexible"])
def test_every_api_version_the_client_implements(
    broker: BrokerProcess, pinned: dict[ApiKey, tuple[int, ...]]
) -> None:
    """The newest (flexible, header v2) and the older (header v1) versions both work."""
    topic = f"versions-{len(pinned)}"
    config = ConnectionConfig(allowed_api_versions={int(k): v for k, v in pinned.items()})
    base_ms = 1_750_000_000_000
    sent = _records(50, base_ms)
    with KafkaCluster(broker.bootstrap, config=config) as cluster:
        session = cluster.any_session()
        used = {key: session.version(key) for key in NON_FLEXIBLE}
        assert used == {
            key: pinned[key][0] if key in pinned else max(CLIENT_API_VERSIONS[key])
            for key in NON_FLEXIBLE
        }
        admin = KafkaAdminClient(cluster)
        created = admin.create_topic(topic, num_partitions=2, replication_factor=1)
        # CreateTopics v4 answers carry no topic id
        assert (created.topic_id is None) == (ApiKey.CREATE_TOPICS in pinned)
        metadata = cluster.refresh_metadata([topic]).topic(topic)
        assert metadata is not None
        assert [(p.partition, p.leader_id, p.replicas) for p in metadata.partitions] == [
            (0, 0, (0,)),
            (1, 0, (0,)),
        ]
        KafkaProducer(cluster, acks=ACKS_LEADER).send(topic, 1, sent[:25])
        assert KafkaProducer(cluster, acks=ACKS_NONE).send(topic, 1, sent[25:])[0].base_offset == -1
        consumer = KafkaConsumer(cluster)
        got = list(consumer.consume(topic, 1, 0, max_records=50, idle_timeout_ms=10_000))
        assert [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in got] == [
            (i, s.key, s.value, s.headers, s.timestamp) for i, s in enumerate(sent)
        ]
        assert consumer.latest_offset(topic, 1) == 50
        assert consumer.list_offset(topic, 1, base_ms + 30).offset == 30
        admin.delete_topics([topic])
        assert topic not in admin.list_topics()
