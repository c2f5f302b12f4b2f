"""Copies to the remote tier while the partition's leader is SIGKILLed. Broker 2 is ``A``
(the first leader), broker 3 is ``B``::

    producer          acks=all, one record per batch, all along, records noted as acknowledged
    copy loop on A    ``storage-core tier`` for A's log dir until a few segments are copied
    slow copy on A    ``tier`` with a store that pauses between a segment's objects; A, which
                      also leads ``__remote_log_metadata-0``, is SIGKILLed while the copy is
                      COPY_SEGMENT_STARTED: the copy fails on A's connection and is rolled
                      back, its DELETE_SEGMENT_* events published through the metadata
                      partition's next leader; B leads in the next epoch
    tier on B         the new leader continues the chain from the highest remote offset of
                      its lineage
    more records      acks=all, closing new segments
    copy_segments     the Spark job (local mode) on B: copies them
    quality           the Great Expectations suites over B's log dir and the remote tier:
                      green
    the chain         the COPY_SEGMENT_FINISHED segments cover 0 .. their last offset with
                      no gap and no segment committed twice
    consume from 0    every acknowledged record at its offset (the first ones remote)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import ElectionType
from kafka import KafkaProducer
from kafka import TopicPartition as KTopicPartition
from kafka.admin import KafkaAdminClient
from pyspark.sql import SparkSession

from embedded.zookeeper import ZooKeeperEnsemble
from jobs import copy_segments, quality
from jobs.common.spark import build_spark_session
from storage_core.tiered.metadata.states import RemoteLogSegmentState
from storage_core.tiered.topic_based_rlmm import REMOTE_LOG_METADATA_TOPIC_NAME
from tests.cluster_support import eventually
from tests.scenarios.tiered_replication.stage import TieredStage

A, B = 2, 3
TOPIC = "copy-chaos"
SEGMENT_BYTES = "1000"  # 12 records of 78 bytes
# Local retention by size, above a segment: the leader never rolls its active segment for
# it, so both replicas roll by size at the same offsets; copied segments leave the local log
# while what stays is at least this.
LOCAL_RETENTION_BYTES = "2500"
COPIES_BEFORE_KILL = 3
PRODUCE_TIMEOUT_S = 60.0
SLOW_STORE = "tests.integration.jobs.slow_storage.SlowCopyLocalTieredStorage"
SLOW_COPY_MS = 3000
MORE_RECORDS = 36  # three segments closed after B's tier run


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    os.environ.setdefault("SPARK_LOCAL_DIRS", str(tmp_path_factory.mktemp("spark-local")))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = build_spark_session("tiered-chaos", "local[2]")
    yield session
    session.stop()


class Producing:
    """A producer thread: acks=all, one record per batch; what was acknowledged, by offset."""

    def __init__(self, stage: TieredStage) -> None:
        self.stage = stage
        self.acked: dict[int, str] = {}
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="producing", daemon=True)

    def _run(self) -> None:
        producer = KafkaProducer(
            bootstrap_servers=",".join(b.bootstrap for b in self.stage.brokers.values()),
            acks="all",
            retries=50,
            retry_backoff_ms=200,
            linger_ms=0,
            request_timeout_ms=10_000,
            max_in_flight_requests_per_connection=1,
        )
        try:
            i = 0
            while not self._stop.is_set():
                value = f"chaos-{i:06d}"
                try:
                    offset = (
                        producer.send(TOPIC, value.encode(), partition=0)
                        .get(PRODUCE_TIMEOUT_S)
                        .offset
                    )
                    self.acked[offset] = value
                except Exception as error:  # an unacknowledged record: may or may not be there
                    self.failed.append(f"{value}: {error!r}")
                i += 1
        finally:
            producer.close(timeout=5)

    def __enter__(self) -> Producing:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=PRODUCE_TIMEOUT_S + 10)

    def __exit__(self, *_exc: object) -> None:
        self.stop()


def lead_remote_log_metadata(stage: TieredStage, broker_id: int) -> None:
    """Make ``broker_id`` the leader of ``__remote_log_metadata-0`` (first in its replica
    list, then a preferred election): the copy cut by its death must then also publish its
    rollback through a leader change."""
    tp = KTopicPartition(REMOTE_LOG_METADATA_TOPIC_NAME, 0)
    admin = KafkaAdminClient(bootstrap_servers=stage.bootstrap, request_timeout_ms=10_000)
    try:
        others = [b for b in sorted(stage.brokers) if b != broker_id]
        assert admin.alter_partition_reassignments({tp: [broker_id, *others]}) == {tp: None}
        eventually(lambda: admin.list_partition_reassignments() == {}, what="reassigned")
    finally:
        admin.close()
    if stage.metadata_leader(broker_id, REMOTE_LOG_METADATA_TOPIC_NAME)[0] != broker_id:
        stage.elect(REMOTE_LOG_METADATA_TOPIC_NAME, ElectionType.PREFERRED)
    eventually(
        lambda: stage.metadata_leader(broker_id, REMOTE_LOG_METADATA_TOPIC_NAME)[0] == broker_id,
        what=f"broker {broker_id} leading {tp}",
    )


def finished_chain(stage: TieredStage) -> list[tuple[int, int]]:
    return sorted(
        (s.start_offset, s.end_offset)
        for s in stage.remote_segments(TOPIC)
        if s.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED
    )


def test_copies_across_a_leader_kill_continue_the_chain_and_every_acked_record_is_read(
    zookeeper: ZooKeeperEnsemble, tmp_path: Path, spark: SparkSession
) -> None:
    with TieredStage(zookeeper, tmp_path) as stage:
        stage.create_topic(
            TOPIC,
            (A, B),
            remote_storage_enable="true",
            segment_bytes=SEGMENT_BYTES,
            local_retention_bytes=LOCAL_RETENTION_BYTES,
        )
        lead_remote_log_metadata(stage, A)
        with Producing(stage) as producing:
            copies = 0
            while copies < COPIES_BEFORE_KILL:
                out = stage.tier(A)
                copies += sum(
                    int(line.split("segments=")[1].split()[0])
                    for line in out.splitlines()
                    if line.startswith("partition=") and "status=ok" in line
                )
            # a slow copy runs on A (SLOW_COPY_MS between its .log object and its indexes)
            # and A is SIGKILLed while it is COPY_SEGMENT_STARTED
            slow = subprocess.Popen(
                stage.tier_command(
                    A,
                    "--remote-storage-manager",
                    SLOW_STORE,
                    f"--rsm-config=slow.copy.sleep.ms={SLOW_COPY_MS}",
                ),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            eventually(
                lambda: any(
                    s.state is RemoteLogSegmentState.COPY_SEGMENT_STARTED
                    for s in stage.remote_segments(TOPIC)
                ),
                timeout_s=30,
                what="a copy on A in COPY_SEGMENT_STARTED",
            )
            stage.kill(A)
            output, _ = slow.communicate(timeout=120)
            print(f"--- tier on A while A died: exit {slow.returncode}\n{output}")
            stage.wait_state(TOPIC, leader=B, isr=[B])
            time.sleep(2.0)  # B leads and takes more records
            producing.stop()
        assert len(producing.acked) > 100, len(producing.acked)
        print(f"acknowledged {len(producing.acked)}, not: {producing.failed[:3]}")

        stage.tier(B)
        more = stage.produce(TOPIC, [f"more-{i:06d}" for i in range(MORE_RECORDS)])
        producing.acked.update({offset: f"more-{i:06d}" for i, offset in enumerate(more)})
        summary_path = tmp_path / "copy.json"
        broker_b = stage.brokers[B]
        common = [
            "--bootstrap-server",
            broker_b.bootstrap,
            "--broker-config",
            str(broker_b.config_path),
            "--spark-master",
            "local[2]",
            "--lock-dir",
            str(tmp_path / "locks"),
        ]
        assert copy_segments.main([*common, "--summary-path", str(summary_path)]) == 0
        counts = json.loads(summary_path.read_text())["counts"]
        print(f"copy_segments: {counts}")
        assert counts["segments_copied"] >= 2, counts
        report_dir = tmp_path / "quality"
        code = quality.main([*common, "--report-dir", str(report_dir)])
        report = json.loads((report_dir / quality.SUMMARY_FILE).read_text())
        assert code == 0, report

        states = {s.state for s in stage.remote_segments(TOPIC)}
        # the copy cut by A's death was rolled back (DELETE_SEGMENT_FINISHED: not listed)
        assert states == {RemoteLogSegmentState.COPY_SEGMENT_FINISHED}, states
        chain = finished_chain(stage)
        print(f"remote chain: {len(chain)} segments, {chain[:3]} .. {chain[-3:]}")
        assert chain[0][0] == 0
        assert len(set(chain)) == len(chain), chain  # no segment committed twice
        covered = -1
        for start, end in chain:
            assert start <= covered + 1, f"gap before {start}: {chain}"
            covered = max(covered, end)
        read = dict(stage.consume(TOPIC))
        missing = {o: v for o, v in producing.acked.items() if read.get(o) != v}
        assert not missing, sorted(missing.items())[:5]
