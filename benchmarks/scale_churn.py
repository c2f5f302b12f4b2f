"""History comes and goes beside long-lived remote segments: ``__remote_log_metadata`` per
live segment, cycle after cycle (the ``churn`` step of ``benchmarks/scale.py``).

On a broker of its own at the segment part's first size, holding the S published remote
segments of ``tiered-0`` and no real copies (the copy step's first copy covers offsets the
published segments hold, and segments superseded by an overlapping upload pin the metadata
until they are deleted): they stay live all along, in the oldest records of the metadata
partition, where they pin its log start. The broker is restarted with its metadata compaction
every ``COMPACTION_INTERVAL_MS`` (records older than ``COMPACTION_MIN_LAG_MS`` may go) and the
metadata topic's ``segment.bytes`` set to ``METADATA_SEGMENT_BYTES``, so that records below
the log start leave the disk. Then each cycle publishes, through storage_core's
``KafkaProducer`` as ``ProducerPublisher`` writes them, the events of copies and expiry of a
partition ``churn-0`` (no objects): ``churn`` new segments (COPY_SEGMENT_STARTED, FINISHED)
and the deletion of the cycle before's (DELETE_SEGMENT_STARTED, FINISHED), four records per
segment of history. Once the log start has stopped moving, it samples the metadata
partition's records (log start to end) and ``.log`` bytes per live segment.

Without the compactor the records per live segment grow by about 4 x churn / live each
cycle; with it, they stay between the live segments' two records each and the history the
next re-append of the live segments' events is worth (twice what it costs), cycle after
cycle: flat. ``flat`` in the result: the last third's largest sample within
``FLAT_LIMIT`` x the second third's.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from benchmarks.scale_support import wait_for
from storage_core.client import KafkaCluster
from storage_core.client.admin import KafkaAdminClient
from storage_core.client.admin_requests import AlterConfigOp
from storage_core.client.consumer import KafkaConsumer
from storage_core.client.producer import ACKS_ALL, KafkaProducer
from storage_core.common import TopicIdPartition, TopicPartition, Uuid
from storage_core.protocol.config_resource import AlterConfigOpType, ConfigResourceType
from storage_core.records import SimpleRecord
from storage_core.tiered.metadata import RemoteLogSegmentState, serde
from storage_core.tiered.metadata.metadata import RemoteLogMetadata, RemoteLogSegmentMetadata
from storage_core.tiered.topic_based_rlmm.config import REMOTE_LOG_METADATA_TOPIC_NAME
from tests.broker_process import BrokerProcess
from tests.remote_log_metadata_events import copy_started, state_update

S = RemoteLogSegmentState
COMPACTION_INTERVAL_MS = 1_000
COMPACTION_MIN_LAG_MS = 2_000
METADATA_SEGMENT_BYTES = 256 * 1024
EVENTS_PER_SEND = 1_000
SETTLED_S = 4.0
"""The log start unchanged this long (more than two compaction rounds past the lag): settled."""
SETTLE_TIMEOUT_S = 120.0
FLAT_LIMIT = 1.25
START_TIMEOUT_S = 600.0


def publish(cluster: KafkaCluster, events: Sequence[RemoteLogMetadata]) -> None:
    """``events`` in order to the metadata partition (one: the broker's is 1 partition)."""
    producer = KafkaProducer(cluster, acks=ACKS_ALL)
    now_ms = int(time.time() * 1000)
    for start in range(0, len(events), EVENTS_PER_SEND):
        records = [
            SimpleRecord(key=None, value=serde.serialize(event), timestamp=now_ms)
            for event in events[start : start + EVENTS_PER_SEND]
        ]
        producer.send(REMOTE_LOG_METADATA_TOPIC_NAME, 0, records)


def metadata_offsets(cluster: KafkaCluster) -> tuple[int, int]:
    """(log start offset, log end offset) of the metadata partition."""
    consumer = KafkaConsumer(cluster)
    return (
        consumer.earliest_offset(REMOTE_LOG_METADATA_TOPIC_NAME, 0),
        consumer.latest_offset(REMOTE_LOG_METADATA_TOPIC_NAME, 0),
    )


def metadata_bytes(broker: BrokerProcess) -> int:
    return sum(
        f.stat().st_size for f in broker.log_dir.glob(f"{REMOTE_LOG_METADATA_TOPIC_NAME}-*/*.log")
    )


def settle(cluster: KafkaCluster) -> tuple[int, int]:
    """The metadata partition's offsets once its log start stopped moving."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    last = metadata_offsets(cluster)
    since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = metadata_offsets(cluster)
        if now[0] != last[0]:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= SETTLED_S:
            return now
    return metadata_offsets(cluster)


def restart_compacting(broker: BrokerProcess) -> None:
    broker.stop()
    with broker.config_path.open("a") as config:
        config.write(
            f"remote.log.metadata.compaction.interval.ms={COMPACTION_INTERVAL_MS}\n"
            f"remote.log.metadata.compaction.min.lag.ms={COMPACTION_MIN_LAG_MS}\n"
        )
    broker.start(timeout_s=START_TIMEOUT_S)


def churn(broker: BrokerProcess, live_segments: int, *, cycles: int) -> dict[str, Any]:
    """``cycles`` cycles of history beside ``live_segments`` live remote segments."""
    restart_compacting(broker)
    per_cycle = max(250, live_segments // 2)
    tip = TopicIdPartition(Uuid.random(), TopicPartition("churn", 0))
    records_per_live: list[float] = []
    written_per_live = 0.0
    bytes_per_live: list[float] = []
    history_records = 0
    with KafkaCluster(broker.bootstrap) as cluster:
        KafkaAdminClient(cluster).incremental_alter_configs(
            ConfigResourceType.TOPIC,
            REMOTE_LOG_METADATA_TOPIC_NAME,
            [
                AlterConfigOp(
                    name="segment.bytes",
                    op=AlterConfigOpType.SET,
                    value=str(METADATA_SEGMENT_BYTES),
                )
            ],
        )
        wait_for(lambda: metadata_offsets(cluster)[1] > 0, "the metadata partition", 60)
        previous: list[RemoteLogSegmentMetadata] = []
        next_offset = 0
        for _cycle in range(cycles):
            copied = [copy_started(tip, next_offset + i, next_offset + i) for i in range(per_cycle)]
            next_offset += per_cycle
            events: list[RemoteLogMetadata] = []
            for segment in copied:
                events += [segment, state_update(segment, S.COPY_SEGMENT_FINISHED)]
            for segment in previous:
                events += [
                    state_update(segment, S.DELETE_SEGMENT_STARTED),
                    state_update(segment, S.DELETE_SEGMENT_FINISHED),
                ]
            publish(cluster, events)
            history_records += len(events)
            previous = copied
            start, end = settle(cluster)
            live = live_segments + len(copied)
            records_per_live.append(round((end - start) / live, 2))
            written_per_live = round(end / live, 2)  # what the partition holds uncut
            bytes_per_live.append(round(metadata_bytes(broker) / live, 1))
    third = max(1, cycles // 3)
    second, last = bytes_per_live[third : 2 * third], bytes_per_live[2 * third :]
    flat = bool(second) and bool(last) and max(last) <= FLAT_LIMIT * max(second)
    return {
        "churn_cycles": cycles,
        "churn_segments_per_cycle": per_cycle,
        "churn_history_records": history_records,
        "churn_live_segments": live_segments + per_cycle,
        "churn_records_per_live_segment": records_per_live,
        "churn_records_written_per_live_segment": written_per_live,
        "churn_bytes_per_live_segment": bytes_per_live,
        "churn_flat": flat,
    }
