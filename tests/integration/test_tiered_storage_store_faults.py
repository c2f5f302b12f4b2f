"""Consumers of tiered offsets when the object store hangs or loses its objects.

A broker process with ``S3RemoteStorageManager`` (moto behind ``tests/tcp_relay.py``, the
store's default S3 timeouts: a hung request fails only after 10 s reads and 20 s of retries)
serves a topic whose tiered segments are gone locally::

    600 records, copied; local retention    local: [j..k][active]  remote: seg 0..k (FINISHED)

    store hung (relay blackhole)
      fetch offset 0, raw, max wait 0.5 s and 15 s   KAFKA_STORAGE_ERROR, each within a bound
      kafka-python, confluent-kafka from 0           the error reaches them, they retry
                                                     (librdkafka: once error partitions carry
                                                     an empty record set, not null)
    store emptied (every object deleted)
      fetch offset 0, raw, many times                UNKNOWN_SERVER_ERROR naming nothing hidden
      kafka-python / confluent-kafka from 0          the error is raised / delivered to the app
      broker log                                     one WARN per lost segment, not per fetch
    store hung, 200 more records
      storage-core tier --run-timeout-s 5            exit 1 within the bound, naming the store
"""

from __future__ import annotations

import datetime
import logging
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import KafkaError
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from kafka import KafkaConsumer, TopicPartition
from kafka.errors import UnknownError
from kio.schema.errors import ErrorCode

from tests.broker_process import BrokerProcess
from tests.integration import raw_wire
from tests.integration.test_tiered_storage_faults import (
    BUCKET,
    RECORDS,
    TOPIC,
    Store,
    create_topic,
    produce,
    store,
)
from tests.tiered_broker_support import (
    EARLIEST_LOCAL,
    FETCH_VERSION,
    client_rlmm,
    copy_eligible_segments,
    list_offset,
    raw_fetch,
    wait_until,
)

__all__ = ["store"]  # the fixture, shared with the outage tests

pytestmark = pytest.mark.timeout(240)

# Generous bounds (the machine is shared); the report gives the measured figures.
FETCH_ANSWERED_WITHIN_S = 5.0
CLIENT_WATCH_S = 6.0
MAX_LOST_SEGMENT_WARNINGS = 3
TIER_EXIT_SLACK_S = 15.0  # interpreter start, metadata, the first request
PATIENT_REMOTE_FETCH_WAIT_MS = 30_000


@pytest.fixture
def tiered_broker(tmp_path: Path, store: Store) -> Iterator[BrokerProcess]:
    """A broker reading the store with its default S3 timeouts, and a topic whose copied
    segments are gone locally."""
    with broker_with_tiered_topic(tmp_path, store) as broker:
        yield broker


@pytest.fixture
def patient_tiered_broker(tmp_path: Path, store: Store) -> Iterator[BrokerProcess]:
    """``tiered_broker`` waiting up to ``PATIENT_REMOTE_FETCH_WAIT_MS`` for a remote read: a
    store that answers slowly (moto on a loaded machine) is then never taken for one that
    does not answer (KAFKA_STORAGE_ERROR), so each fetch gets the answer of what the store
    said."""
    overrides = {"remote.fetch.max.wait.ms": str(PATIENT_REMOTE_FETCH_WAIT_MS)}
    with broker_with_tiered_topic(tmp_path, store, overrides) as broker:
        yield broker


@contextmanager
def broker_with_tiered_topic(
    tmp_path: Path, store: Store, overrides: dict[str, str] | None = None
) -> Iterator[BrokerProcess]:
    slow_defaults = {
        k: v
        for k, v in store.rsm_config().items()
        if not k.startswith(("rsm.config.s3.retry", "rsm.config.s3.connect", "rsm.config.s3.read"))
    }
    with BrokerProcess(
        tmp_path / "broker",
        overrides={
            "remote.log.storage.system.enable": "true",
            "remote.log.storage.manager.class.name": "S3RemoteStorageManager",
            **slow_defaults,
            "remote.log.metadata.topic.num.partitions": "1",
            "remote.log.manager.task.interval.ms": "200",
            "log.retention.check.interval.ms": "200",
            **(overrides or {}),
        },
    ) as broker:
        bootstrap = broker.bootstrap
        create_topic(bootstrap)
        produce(bootstrap, 0, RECORDS)
        with client_rlmm(bootstrap) as rlmm:
            copied = copy_eligible_segments(
                bootstrap, broker.log_dir / f"{TOPIC}-0", TOPIC, store.rsm(), rlmm
            )
        assert len(copied) >= 5
        wait_until(
            lambda: list_offset(bootstrap, TOPIC, EARLIEST_LOCAL)[0] > copied[0].end_offset,
            "local retention to delete copied segments",
        )
        assert raw_fetch(broker.port, TOPIC, 0).error_code == ErrorCode.none
        yield broker
        # The store back before the broker stops: its shutdown would otherwise wait out the
        # reads hung on it (up to 10 s, as Kafka's remote reader pool), which is not under test.
        store.relay.start()


def empty_the_store(store: Store) -> None:
    client = store.s3.client()
    for key in store.object_keys():
        client.delete_object(Bucket=BUCKET, Key=key)
    assert store.object_keys() == []


def require_empty_record_sets_on_error_partitions(port: int) -> None:
    """librdkafka cannot parse a null record set (size -1), so it never sees the partition's
    error: skip unless the broker answers an error partition with an empty record set."""
    module = raw_wire.request_classes(1, FETCH_VERSION)
    with raw_wire.connect(port) as sock:
        body = raw_wire.call(
            sock,
            1,
            FETCH_VERSION,
            replica_id=-1,
            max_wait=datetime.timedelta(milliseconds=500),
            min_bytes=1,
            max_bytes=1 << 20,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=(
                module.FetchTopic(
                    topic=TOPIC,
                    partitions=(
                        module.FetchPartition(
                            partition=0, fetch_offset=0, partition_max_bytes=1 << 20
                        ),
                    ),
                ),
            ),
            forgotten_topics_data=(),
            rack_id="",
        )
    (partition,) = body.responses[0].partitions
    assert partition.error_code != ErrorCode.none
    if partition.records is None:
        pytest.skip("error partitions carry a null record set, which librdkafka cannot parse")


def kafka_python_fetch_errors(bootstrap: str, caplog: pytest.LogCaptureFixture) -> list[str]:
    """Poll from offset 0 for ``CLIENT_WATCH_S``: no record may arrive, and the fetcher's
    error lines (what kafka-python saw of each failed fetch) are returned."""
    caplog.clear()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        tp = TopicPartition(TOPIC, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        with caplog.at_level(logging.DEBUG, logger="kafka.consumer.fetcher"):
            deadline = time.monotonic() + CLIENT_WATCH_S
            while time.monotonic() < deadline:
                assert consumer.poll(timeout_ms=500) == {}
    finally:
        consumer.close()
    return [r.getMessage() for r in caplog.records if "Error fetching partition" in r.getMessage()]


def confluent_consumer(bootstrap: str, log: logging.Logger) -> ConfluentConsumer:
    consumer = ConfluentConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "store-faults",
            "enable.auto.commit": False,
            "debug": "fetch",
            "logger": log,
        }
    )
    consumer.assign([ConfluentTopicPartition(TOPIC, 0, 0)])
    return consumer


def test_hung_store_answers_tiered_fetches_promptly_with_a_storage_error(
    tiered_broker: BrokerProcess, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    store.relay.blackhole()
    results = [raw_fetch(tiered_broker.port, TOPIC, 0, max_wait_ms=w) for w in (500, 15_000) * 3]
    elapsed = [round(r.elapsed_s, 3) for r in results]
    print(f"hung store: raw fetch of offset 0 answered in {elapsed} s")
    for result in results:
        assert result.error_code == ErrorCode.kafka_storage_error, elapsed
        assert result.records in (b"", None)
        assert result.elapsed_s < FETCH_ANSWERED_WITHIN_S, elapsed

    errors = kafka_python_fetch_errors(tiered_broker.bootstrap, caplog)
    print(f"hung store: kafka-python saw {len(errors)} failed fetches in {CLIENT_WATCH_S} s")
    assert len(errors) >= 2, errors
    assert all("KafkaStorageError" in e for e in errors)


def test_hung_store_reaches_a_librdkafka_consumer_as_a_storage_error(
    tiered_broker: BrokerProcess, store: Store
) -> None:
    store.relay.blackhole()
    require_empty_record_sets_on_error_partitions(tiered_broker.port)
    lines: list[str] = []
    log = logging.getLogger("librdkafka-store-faults")
    log.addHandler(_Collect(lines))
    log.setLevel(logging.DEBUG)
    log.propagate = False
    consumer = confluent_consumer(tiered_broker.bootstrap, log)
    try:
        deadline = time.monotonic() + CLIENT_WATCH_S
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            assert message is None or message.error() is not None
    finally:
        consumer.close()
    failed = [line for line in lines if re.search(r"disk error|KAFKA_STORAGE_ERROR", line, re.I)]
    print(f"hung store: librdkafka logged {len(failed)} failed fetches in {CLIENT_WATCH_S} s")
    assert len(failed) >= 2, lines[-20:]


def test_emptied_store_fails_tiered_fetches_for_the_client_and_warns_once_per_segment(
    patient_tiered_broker: BrokerProcess, store: Store
) -> None:
    empty_the_store(store)
    started = time.monotonic()
    results = [raw_fetch(patient_tiered_broker.port, TOPIC, 0) for _ in range(200)]
    per_fetch_s = (time.monotonic() - started) / len(results)
    print(f"emptied store: 200 raw fetches of offset 0, {per_fetch_s * 1000:.1f} ms each")
    assert {r.error_code for r in results} == {ErrorCode.unknown_server_error}

    consumer = KafkaConsumer(
        bootstrap_servers=patient_tiered_broker.bootstrap, enable_auto_commit=False
    )
    try:
        tp = TopicPartition(TOPIC, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        with pytest.raises(UnknownError):
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                assert consumer.poll(timeout_ms=500) == {}
    finally:
        consumer.close()

    log = patient_tiered_broker.output_path.read_text(errors="replace")
    warnings = [line for line in log.splitlines() if "WARNING" in line and "remote segment" in line]
    print(f"emptied store: {len(warnings)} WARN lines about lost segments")
    assert 1 <= len(warnings) <= MAX_LOST_SEGMENT_WARNINGS, warnings
    assert "COPY_SEGMENT_FINISHED" in warnings[0] and "partition=tiered-faults-0" in warnings[0]
    assert log.count("remote fetch failed") == 0


def test_emptied_store_reaches_a_librdkafka_consumer_as_an_error(
    patient_tiered_broker: BrokerProcess, store: Store
) -> None:
    empty_the_store(store)
    require_empty_record_sets_on_error_partitions(patient_tiered_broker.port)
    consumer = confluent_consumer(patient_tiered_broker.bootstrap, quiet_logger())
    try:
        error = None
        deadline = time.monotonic() + 10
        while error is None and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            assert message is None or message.error() is not None
            error = None if message is None else message.error()
    finally:
        consumer.close()
    assert error is not None and error.code() == KafkaError.UNKNOWN, error


def quiet_logger() -> logging.Logger:
    log = logging.getLogger("librdkafka-quiet")
    log.propagate = False
    return log


class _Collect(logging.Handler):
    def __init__(self, lines: list[str]) -> None:
        super().__init__(logging.DEBUG)
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_tier_command_against_a_hung_store_exits_within_its_run_timeout(
    tiered_broker: BrokerProcess, store: Store, tmp_path: Path
) -> None:
    """Against a hung store one copy (request timeouts, then the rollback's) takes ~40 s per
    partition with the store's default timeouts; ``--run-timeout-s 5`` ends the run at 5 s,
    exit 1, naming the store and the bound."""
    produce(tiered_broker.bootstrap, RECORDS, 200)  # new closed segments to copy
    store.relay.blackhole()
    rsm_config = [
        f"{k}={v}"
        for k, v in store.rsm_config().items()
        if not k.startswith(("rsm.config.s3.retry", "rsm.config.s3.connect", "rsm.config.s3.read"))
    ]
    started = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "storage_core.cli",
            "tier",
            "--bootstrap-server",
            tiered_broker.bootstrap,
            "--log-dir",
            str(tiered_broker.log_dir),
            "--remote-storage-manager",
            "S3RemoteStorageManager",
            *(f"--rsm-config={item}" for item in rsm_config),
            "--run-timeout-s",
            "5",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    elapsed = time.monotonic() - started
    print(f"tier against a hung store: exit {done.returncode} after {elapsed:.1f} s")
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert elapsed < 5 + TIER_EXIT_SLACK_S, elapsed
    assert "--run-timeout-s=5" in done.stderr, done.stderr
    assert BUCKET in done.stderr and store.relay.url in done.stderr, done.stderr
