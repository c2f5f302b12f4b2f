"""Helpers for tests (and benchmarks) of tiered storage against a broker process.

- ``raw_fetch``: one Fetch v11 over a raw socket, decoded with kio (the partition's error
  code, record bytes, LSO and aborted transactions, nothing retried or hidden as a client
  library would; ``isolation_level=1`` reads as a read_committed consumer);
- ``list_offset``: ListOffsets v9 to a partition's leader (``-2`` earliest, ``-4`` earliest
  local, ``-5`` latest tiered, ``-1`` latest);
- ``copy_eligible_segments``: copy what a tiering job would copy now, with the operations
  library, a client-mode RLMM and any ``RemoteStorageManager``;
- ``batch_offsets``: the offsets of a record set, from its batch headers;
- ``local_offsets``: every offset held in a partition directory's segment files.
"""

from __future__ import annotations

import datetime
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kio.schema.errors import ErrorCode
from kio.schema.list_offsets.v9 import request as list_v9
from kio.schema.list_offsets.v9.response import ListOffsetsResponse as ListOffsetsResponseV9
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i64

from storage_core.client import KafkaCluster
from storage_core.common import TopicPartition
from storage_core.log.log_config import LogConfig
from storage_core.records import FileRecords
from storage_core.tiered.metadata.metadata import RemoteLogSegmentMetadata
from storage_core.tiered.operations.copy import candidate_segments, copy_segment
from storage_core.tiered.operations.fencing import LeaderEpochFence
from storage_core.tiered.operations.log_view import LogView
from storage_core.tiered.remote_storage_manager import RemoteStorageManager
from storage_core.tiered.topic_based_rlmm import (
    ConsumerTaskConfig,
    TopicBasedRemoteLogMetadataManager,
)
from tests.integration import raw_wire

EARLIEST, EARLIEST_LOCAL, LATEST_TIERED, LATEST = -2, -4, -5, -1
FETCH_VERSION = 11
_BATCH_HEAD = struct.Struct(">qi")
_LAST_OFFSET_DELTA = struct.Struct(">i")


@dataclass(frozen=True, slots=True, kw_only=True)
class RawFetch:
    error_code: ErrorCode
    records: bytes
    high_watermark: int
    log_start_offset: int
    elapsed_s: float
    last_stable_offset: int = -1
    aborted_transactions: tuple[tuple[int, int], ...] | None = None  # (producer id, first)


def raw_fetch(
    port: int,
    topic: str,
    offset: int,
    *,
    max_bytes: int = 1 << 20,
    max_wait_ms: int = 5_000,
    timeout_s: float = 30.0,
    isolation_level: int = 0,
) -> RawFetch:
    """Fetch partition 0 of ``topic`` from ``offset`` once (min_bytes 1)."""
    module = raw_wire.request_classes(1, FETCH_VERSION)
    start = time.monotonic()
    with raw_wire.connect(port, timeout_s=timeout_s) as sock:
        body = raw_wire.call(
            sock,
            1,
            FETCH_VERSION,
            replica_id=-1,
            max_wait=datetime.timedelta(milliseconds=max_wait_ms),
            min_bytes=1,
            max_bytes=max_bytes,
            isolation_level=isolation_level,
            session_id=0,
            session_epoch=-1,
            topics=(
                module.FetchTopic(
                    topic=topic,
                    partitions=(
                        module.FetchPartition(
                            partition=0,
                            fetch_offset=offset,
                            partition_max_bytes=max_bytes,
                        ),
                    ),
                ),
            ),
            forgotten_topics_data=(),
            rack_id="",
        )
    elapsed = time.monotonic() - start
    (partition,) = body.responses[0].partitions
    aborted = partition.aborted_transactions
    return RawFetch(
        error_code=partition.error_code,
        records=bytes(partition.records or b""),
        high_watermark=int(partition.high_watermark),
        log_start_offset=int(partition.log_start_offset),
        elapsed_s=elapsed,
        last_stable_offset=int(partition.last_stable_offset),
        aborted_transactions=None
        if aborted is None
        else tuple((int(a.producer_id), int(a.first_offset)) for a in aborted),
    )


def batch_offsets(records: bytes) -> list[int]:
    """Every offset of the whole batches in ``records`` (a partial last batch is ignored)."""
    offsets: list[int] = []
    position = 0
    while len(records) - position >= _BATCH_HEAD.size:
        base_offset, length = _BATCH_HEAD.unpack_from(records, position)
        if position + 12 + length > len(records):
            break
        (last_delta,) = _LAST_OFFSET_DELTA.unpack_from(records, position + 23)
        offsets.extend(range(base_offset, base_offset + last_delta + 1))
        position += 12 + length
    return offsets


def list_offset(
    bootstrap: str, topic: str, timestamp: int, *, partition: int = 0, isolation_level: int = 0
) -> tuple[int, int]:
    """ListOffsets v9 to the partition's leader: ``(offset, leader epoch)``; latest at
    ``isolation_level=1`` is the LSO."""
    with KafkaCluster(bootstrap) as cluster:
        session = cluster.leader_session(TopicPartition(topic, partition))
        response = session.send(
            list_v9.ListOffsetsRequest(
                replica_id=BrokerId(-1),
                isolation_level=i8(isolation_level),
                topics=(
                    list_v9.ListOffsetsTopic(
                        name=TopicName(topic),
                        partitions=(
                            list_v9.ListOffsetsPartition(
                                partition_index=i32(partition),
                                current_leader_epoch=i32(-1),
                                timestamp=i64(timestamp),
                            ),
                        ),
                    ),
                ),
            ),
            ListOffsetsResponseV9,
        )
    (answer,) = response.topics[0].partitions
    if answer.error_code != ErrorCode.none:
        raise AssertionError(f"ListOffsets {topic}-{partition} {timestamp}: {answer.error_code}")
    return int(answer.offset), int(answer.leader_epoch)


def client_rlmm(bootstrap: str) -> TopicBasedRemoteLogMetadataManager:
    return TopicBasedRemoteLogMetadataManager.for_client(
        bootstrap, consumer_config=ConsumerTaskConfig(idle_poll_ms=20)
    )


def copy_eligible_segments(
    bootstrap: str,
    partition_dir: Path,
    topic: str,
    rsm: RemoteStorageManager,
    rlmm: TopicBasedRemoteLogMetadataManager,
) -> list[RemoteLogSegmentMetadata]:
    """Copy every segment a tiering job would copy now; returns their FINISHED metadata.
    A failing copy propagates (after the operations library rolled it back)."""
    last_stable_offset, _ = list_offset(bootstrap, topic, LATEST, isolation_level=1)
    high_watermark, _ = list_offset(bootstrap, topic, LATEST)
    view = LogView.read(
        partition_dir, high_watermark=high_watermark, last_stable_offset=last_stable_offset
    )
    epoch = view.latest_epoch
    if epoch is None:
        raise AssertionError(f"{partition_dir}: no leader epoch yet")
    fence = LeaderEpochFence(planned_leader_epoch=epoch, current_leader_epoch=lambda: epoch)
    config = LogConfig(remote_storage_enable=True)
    copied = []
    for segment in candidate_segments(view, rlmm, config=config):
        result = copy_segment(view, segment, rsm=rsm, rlmm=rlmm, fence=fence, broker_id=0)
        copied.append(result.metadata)
    return copied


def local_offsets(partition_dir: Path) -> list[int]:
    """Every offset in the partition's segment files, oldest segment first."""
    offsets: list[int] = []
    for path in sorted(partition_dir.glob("*.log")):
        with FileRecords.open(path, mutable=False) as file:
            for _position, header in file.batches():
                offsets.extend(range(header.base_offset, header.last_offset + 1))
    return offsets


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")
